//! One request of the Kubernetes and metadata clients, answered whole: its
//! status and body text, timed for their metrics. It owns no policy: what a
//! status means is each client's to decide. The Linode client reads its
//! answers itself (rate-limit headers, retries, pacing).

use std::time::{Duration, Instant};
use ureq::http::Response;
use ureq::Body;

/// Sends with `send`, reads the whole body, and tells `record` the status
/// (None when no answer came) and how long it all took.
pub fn exchange(
    send: impl FnOnce() -> Result<Response<Body>, ureq::Error>,
    record: impl FnOnce(Option<u16>, Duration),
) -> Result<(u16, String), ureq::Error> {
    let started = Instant::now();
    let answered = send().and_then(|mut response| {
        let status = response.status().as_u16();
        response
            .body_mut()
            .read_to_string()
            .map(|body| (status, body))
    });
    record(
        answered.as_ref().ok().map(|(status, _)| *status),
        started.elapsed(),
    );
    answered
}
