//! The lease's name, namespace, holder identity and periods, and the rule
//! that makes fencing work: a holder that cannot renew stops writing at
//! its last renewal plus the renew deadline, and a Linode write it sent
//! just before may take `LINODE_REQUEST_TIMEOUT` more to land, so the two
//! together must end before the lease can be taken (its duration).
//! Settings that break the rule are refused at start. Values only.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `LEASE_NAME`.
    pub name: String,
    /// `LEASE_NAMESPACE`, else the service account's namespace file.
    pub namespace: String,
    /// `LEASE_HOLDER_IDENTITY`, else unique per process.
    pub identity: String,
    /// `LEASE_DURATION`: how long a lease nobody renews keeps others out.
    pub duration: Duration,
    /// `LEASE_RENEW_DEADLINE`: how long the holder writes on without a
    /// successful renewal.
    pub renew_deadline: Duration,
    /// `LEASE_RETRY_PERIOD`: how often it renews, and a standby tries.
    pub retry_period: Duration,
    /// The cluster identity every write records, once settled at start
    /// (`crate::cluster_id::settle`); a lease recording another is never
    /// taken.
    pub cluster: Option<String>,
}

impl LeaseSettings {
    /// Refuses periods under which fencing cannot work; `request_timeout`
    /// is `LINODE_REQUEST_TIMEOUT`.
    pub fn check(&self, request_timeout: Duration) -> Result<(), String> {
        let show = |d: Duration| format!("{}ms", d.as_millis());
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "LEASE_RETRY_PERIOD ({}) must be above zero and shorter than LEASE_RENEW_DEADLINE ({}): the holder renews several times within its deadline",
                show(self.retry_period),
                show(self.renew_deadline)
            ));
        }
        if self.renew_deadline + request_timeout >= self.duration {
            return Err(format!(
                "LEASE_RENEW_DEADLINE ({}) plus LINODE_REQUEST_TIMEOUT ({}) must be shorter than LEASE_DURATION ({}): a holder that cannot renew stops writing at its deadline, and a Linode write it sent just before must land before another controller can take the lease",
                show(self.renew_deadline),
                show(request_timeout),
                show(self.duration)
            ));
        }
        if self.duration.as_secs() == 0 || self.duration.subsec_nanos() != 0 {
            return Err(format!(
                "LEASE_DURATION ({}) must be a whole number of seconds, as a Lease records it",
                show(self.duration)
            ));
        }
        Ok(())
    }

    /// The bound of one lease request: well below the renew deadline, so
    /// a hung API server costs a try, not the lease.
    pub fn call_timeout(&self) -> Duration {
        self.renew_deadline / 3
    }

    /// Settings for a process that takes no real lease.
    pub fn for_tests() -> LeaseSettings {
        LeaseSettings {
            name: "linode-nfs-csi-controller".into(),
            namespace: "kube-system".into(),
            identity: "sole".into(),
            duration: Duration::from_secs(30),
            renew_deadline: Duration::from_secs(15),
            retry_period: Duration::from_secs(3),
            cluster: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_fence_and_periods_that_cannot_are_refused() {
        let ten = Duration::from_secs(10);
        let s = LeaseSettings::for_tests();
        assert_eq!(s.check(ten), Ok(()));
        // The sidecars' own periods: a write sent at the deadline could
        // land after the lease was taken.
        let sidecars = LeaseSettings {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
            ..s.clone()
        };
        let e = sidecars.check(ten).unwrap_err();
        assert!(e.contains("LINODE_REQUEST_TIMEOUT"), "{e}");
        let slow_retry = LeaseSettings {
            retry_period: Duration::from_secs(15),
            ..s.clone()
        };
        assert!(slow_retry
            .check(ten)
            .unwrap_err()
            .contains("LEASE_RETRY_PERIOD"));
        let fraction = LeaseSettings {
            duration: Duration::from_millis(30_500),
            ..s
        };
        assert!(fraction.check(ten).unwrap_err().contains("whole number"));
    }
}
