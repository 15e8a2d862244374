//! The template of a Linode API path, for counting requests by endpoint
//! without ids in the key: the request metrics (`csi_linode_request_*`)
//! and the fake's per-endpoint counters, which dev mode prints at exit.

/// `nfs/spaces/7/filesystems/301?page=2` → `nfs/spaces/{id}/filesystems/{id}`.
pub fn endpoint_template(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    path.trim_matches('/')
        .split('/')
        .map(|segment| {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                "{id}"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_queries_leave_the_template() {
        assert_eq!(
            endpoint_template("nfs/spaces/7/filesystems/301?page=2"),
            "nfs/spaces/{id}/filesystems/{id}"
        );
        assert_eq!(
            endpoint_template("/nfs/spaces/7/filesystems/301/snapshots/9/clone"),
            "nfs/spaces/{id}/filesystems/{id}/snapshots/{id}/clone"
        );
        assert_eq!(endpoint_template("nfs/spaces"), "nfs/spaces");
        assert_eq!(
            endpoint_template("linode/instances/424242"),
            "linode/instances/{id}"
        );
    }
}
