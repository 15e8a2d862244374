//! The metadata client against the fake metadata service: the token dance,
//! and `Unavailable` (the node's fall-back signal) when the service is slow,
//! stopped or was never there.

use linode_nfs_csi::fake::{unreachable_url, FakeMetadata};
use linode_nfs_csi::metadata::{Instance, MetadataClient};
use linode_nfs_csi::Error;
use std::time::{Duration, Instant};

#[test]
fn token_then_instance() {
    let fake = FakeMetadata::start(61234567, "us-ord").unwrap();
    let client = MetadataClient::new(&format!("{}/", fake.url()), Duration::from_secs(2));
    let got = client.instance().unwrap();
    assert_eq!(
        got,
        Instance {
            id: 61234567,
            region: "us-ord".into()
        }
    );
    assert_eq!(fake.requests(), 2, "PUT /v1/token, then GET /v1/instance");
    // Every call takes a fresh token, so expiring the old ones is harmless.
    fake.expire_tokens();
    assert_eq!(client.instance().unwrap().id, 61234567);
}

#[test]
fn the_fake_enforces_the_token_protocol() {
    let fake = FakeMetadata::start(1, "us-ord").unwrap();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let status =
        |r: Result<ureq::http::Response<ureq::Body>, ureq::Error>| r.unwrap().status().as_u16();
    let url = fake.url();
    assert_eq!(status(agent.get(format!("{url}/v1/instance")).call()), 401);
    assert_eq!(
        status(agent.put(format!("{url}/v1/token")).send_empty()),
        400
    );
    assert_eq!(
        status(
            agent
                .put(format!("{url}/v1/token"))
                .header("Metadata-Token-Expiry-Seconds", "soon")
                .send_empty()
        ),
        400
    );
    let mut resp = agent
        .put(format!("{url}/v1/token"))
        .header("Metadata-Token-Expiry-Seconds", "60")
        .send_empty()
        .unwrap();
    let token = resp.body_mut().read_to_string().unwrap();
    assert_eq!(token.len(), 64, "text/plain gives the raw token");
    let with = |t: &str| {
        agent
            .get(format!("{url}/v1/network"))
            .header("Metadata-Token", t)
            .call()
    };
    assert_eq!(status(with(&token)), 200);
    assert_eq!(status(with("forged")), 401);
    fake.expire_tokens();
    assert_eq!(status(with(&token)), 401);
}

#[test]
fn unreachable_slow_or_stopped_is_unavailable() {
    let client = MetadataClient::new(&unreachable_url(), Duration::from_secs(2));
    let err = client.instance().unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");

    let fake = FakeMetadata::start(1, "us-ord").unwrap();
    fake.set_delay(Duration::from_secs(5));
    let impatient = MetadataClient::new(&fake.url(), Duration::from_millis(100));
    let started = Instant::now();
    assert!(matches!(
        impatient.instance().unwrap_err(),
        Error::Unavailable(_)
    ));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "gave up at its timeout, not at the reply"
    );

    fake.set_delay(Duration::ZERO);
    let client = MetadataClient::new(&fake.url(), Duration::from_secs(2));
    assert_eq!(client.instance().unwrap().id, 1);
    fake.stop();
    let started = Instant::now();
    let err = client.instance().unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused, not timed out"
    );
}
