//! A Linode token read from a file and rotated while calls are in flight,
//! through the real `LinodeCloud` against the fake API over loopback: the
//! fake accepts only the new token from the moment of the rotation, as
//! Linode does once the old one is revoked.

mod common;

use common::linode::{create_filesystem, fake_and_cloud, SPACE};
use common::TempDir;
use linode_nfs_csi::fake::{FakeLinode, Seed, SpaceSeed};
use linode_nfs_csi::linode::{Cloud, LinodeCloud, LinodeSettings};
use linode_nfs_csi::Error;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Writes the file the way kubelet updates a Secret volume: a new file
/// renamed over the old.
fn write_token(path: &Path, token: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{token}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn client_reading(fake: &FakeLinode, file: &Path) -> Arc<LinodeCloud> {
    let mut settings = LinodeSettings::new(fake.token());
    settings.base_url = fake.url();
    settings.token_file = Some(file.to_path_buf());
    Arc::new(LinodeCloud::new(settings).unwrap())
}

fn refused(fake: &FakeLinode) -> usize {
    fake.requests().iter().filter(|r| !r.authorized).count()
}

#[test]
fn a_token_rotated_mid_burst_costs_each_call_at_most_one_refusal() {
    let (fake, _) = fake_and_cloud(Duration::ZERO);
    let dir = TempDir::new("token-rotate");
    let file = dir.join("token");
    write_token(&file, &fake.token());
    let cloud = client_reading(&fake, &file);
    create_filesystem(&cloud, "before");
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let cloud = cloud.clone();
                s.spawn(move || create_filesystem(&cloud, &format!("burst-{i}")))
            })
            .collect();
        // In the middle of the burst the token is rotated: the API refuses
        // the old one at once, the file holds the new one.
        write_token(&file, "rotated-token");
        fake.rotate_token("rotated-token");
        for call in calls {
            call.join().expect("every create ends OK");
        }
    });
    assert_eq!(fake.filesystems().len(), 51);
    assert!(
        refused(&fake) <= 50,
        "{} refusals for 50 calls",
        refused(&fake)
    );
    let before = refused(&fake);
    create_filesystem(&cloud, "after");
    assert_eq!(refused(&fake), before, "the new token is in use");
}

#[test]
fn a_revoked_token_is_permission_denied_naming_where_it_was_read() {
    let seed = Seed::default().with_space(SpaceSeed::new(SPACE, "shared"));
    let fake = FakeLinode::start(seed).unwrap();
    let dir = TempDir::new("token-revoked");
    let file = dir.join("token");
    write_token(&file, &fake.token());
    let cloud = client_reading(&fake, &file);
    fake.rotate_token("someone-elses");
    let err = cloud.get_space(SPACE).unwrap_err();
    let Error::PermissionDenied(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("LINODE_TOKEN_FILE"), "{message}");
    assert!(!message.contains(&fake.token()), "{message}");
    assert_eq!(
        refused(&fake),
        1,
        "read again, nothing new in it: not sent again"
    );
    // An empty file keeps the last good token (and it is still refused).
    write_token(&file, "");
    assert!(matches!(
        cloud.get_space(SPACE),
        Err(Error::PermissionDenied(_))
    ));
    write_token(&file, "someone-elses");
    cloud.get_space(SPACE).unwrap();
}
