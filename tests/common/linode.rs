//! The fake Linode API for the suites that drive it without the driver
//! binary: the real `LinodeCloud` against a fake with one Space, one raw
//! HTTP request to the fake, as any client would send it, and readings of
//! the requests the fake answered.

use linode_nfs_csi::fake::{FakeLinode, RequestRecord, Seed, SpaceSeed};
use linode_nfs_csi::linode::{Filesystem, LinodeCloud, LinodeSettings, NewFilesystem, WaitPolicy};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The one Space of [`fake_and_cloud`].
pub const SPACE: u64 = 7;

/// A fake with Space 7 (`shared`), whose new objects turn active after
/// `activation`, and the real client against it with default settings.
pub fn fake_and_cloud(activation: Duration) -> (FakeLinode, Arc<LinodeCloud>) {
    let seed = Seed {
        activation_delay_ms: activation.as_millis() as u64,
        ..Seed::default()
    }
    .with_space(SpaceSeed::new(SPACE, "shared"));
    let fake = FakeLinode::start(seed).unwrap();
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = fake.url();
    let cloud = Arc::new(LinodeCloud::new(settings).unwrap());
    (fake, cloud)
}

/// Waits of at most `timeout`, polled fast.
pub fn fast_waits(timeout: Duration) -> WaitPolicy {
    WaitPolicy {
        timeout,
        initial_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
    }
}

/// A new 1 GiB filesystem `label` in [`SPACE`], as the POST answered it.
pub fn create_filesystem(cloud: &LinodeCloud, label: &str) -> Filesystem {
    create_filesystem_in(cloud, SPACE, label)
}

/// A new 1 GiB filesystem `label` in `space`, as the POST answered it.
pub fn create_filesystem_in(cloud: &LinodeCloud, space: u64, label: &str) -> Filesystem {
    use linode_nfs_csi::linode::Cloud;
    cloud
        .create_filesystem(
            space,
            &NewFilesystem {
                label: label.into(),
                region: "us-ord".into(),
                max_capacity_bytes: 1 << 30,
                tags: vec![],
            },
        )
        .unwrap()
}

/// One answer of the fake: status, headers, body text.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
}

impl Reply {
    /// A header's value, its name in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn content_type(&self) -> String {
        self.header("Content-Type").unwrap_or_default().to_string()
    }

    /// The body as JSON; `Null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

/// `method` of `path` (after the host, version included) with the fake's
/// token, `headers` and an optional JSON `body`.
pub fn request(
    fake: &FakeLinode,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Reply {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{}/{path}", fake.url()))
        .header("Authorization", format!("Bearer {}", fake.token()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = match body {
        Some(b) => agent.run(req.body(b.to_string()).unwrap()),
        None => agent.run(req.body(()).unwrap()),
    }
    .unwrap();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    Reply {
        status: resp.status().as_u16(),
        headers,
        text: resp.body_mut().read_to_string().unwrap(),
    }
}

/// How many requests the fake answered with `status`.
pub fn answered(fake: &FakeLinode, status: u16) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.status == Some(status))
        .count()
}

/// Asserts that the first of `requests`, filtered, was refused (400) and
/// that every later one went without a filter and was answered: a refused
/// filter is not tried again.
#[track_caller]
pub fn assert_filter_refused_once(requests: &[RequestRecord], what: &str) {
    assert_eq!(requests[0].status, Some(400), "{:?}", requests[0]);
    assert!(requests[0].x_filter.is_some(), "{:?}", requests[0]);
    let rest = &requests[1..];
    assert!(!rest.is_empty());
    assert!(
        rest.iter()
            .all(|r| r.x_filter.is_none() && r.status == Some(200)),
        "{what}: {rest:?}"
    );
}
