//! The real `LinodeCloud` against the API shapes other clients have met and
//! our fake does not serve by default: a refused or ignored tag filter,
//! no per-filesystem access-policy endpoint, capacity only in `stats`,
//! `null` and missing fields, list items missing an essential field. A
//! small scripted server over loopback HTTP answers each shape and counts
//! what it was asked.

use linode_nfs_csi::fake::{HttpRequest, HttpResponse, HttpServer};
use linode_nfs_csi::linode::{Cloud, LinodeCloud, LinodeSettings, RetryPolicy, Status};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MARK: &str = "csi.linodenfs.csi.linode.com";

/// What the scripted backend does with a tag filter.
#[derive(Clone, Copy, PartialEq)]
enum TagFilter {
    Refused,
    Ignored,
}

/// How the backend answers a filesystem's access-policy endpoint.
#[derive(Clone, Copy)]
enum PolicyEndpoint {
    Missing(u16),
}

struct Backend {
    server: HttpServer,
    /// `METHOD path [filtered]` of every request, in order.
    seen: Arc<Mutex<Vec<String>>>,
}

fn filesystems() -> Vec<Value> {
    vec![
        json!({"id": 1, "space_id": 7, "label": "pvc-ours", "region": "us-ord",
               "status": "active", "tags": [MARK], "max_capacity_bytes": 1_073_741_824_i64}),
        // Nulls where Go clients read zero values; capacity only in stats.
        json!({"id": 2, "space_id": 7, "label": null, "region": null, "status": null,
               "tags": [MARK, "team:a"], "protocol_versions": null, "mount_target_ips": null,
               "stats": {"max_capacity_bytes": 5_368_709_120_i64, "used_capacity_bytes": null}}),
        // Not ours: never a volume, whatever the API did with the filter.
        json!({"id": 3, "space_id": 7, "label": "someone-elses", "region": "us-ord",
               "status": "active", "tags": ["other"]}),
        json!({"id": 4, "space_id": 7, "label": "untagged", "region": "us-ord", "status": "active"}),
        // Missing an essential field: skipped, the rest of the list stands.
        json!({"id": 5, "label": "no-space", "tags": [MARK]}),
    ]
}

fn page(data: Vec<Value>) -> Value {
    let n = data.len();
    json!({"data": data, "page": 1, "pages": 1, "results": n})
}

fn start(tags: TagFilter, policy: PolicyEndpoint) -> Backend {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = move |req: HttpRequest| {
        let filter = req.header("X-Filter").map(str::to_string);
        log.lock().unwrap().push(format!(
            "{} {}{}",
            req.method,
            req.path,
            if filter.is_some() { " [filtered]" } else { "" }
        ));
        let path = req.path.trim_start_matches("/v4beta/").to_string();
        let segments: Vec<&str> = path.split('/').collect();
        match segments[..] {
            ["nfs", "spaces", "7", "filesystems"] => {
                let by_tag = filter.as_deref().is_some_and(|f| f.contains("\"tags\""));
                if by_tag && tags == TagFilter::Refused {
                    return HttpResponse::json(
                        400,
                        &json!({"errors": [{"field": "X-Filter", "reason": "Cannot filter on tags"}]}),
                    );
                }
                HttpResponse::json(200, &page(filesystems()))
            }
            ["nfs", "spaces", "7", "filesystems", id] => {
                match filesystems()
                    .into_iter()
                    .find(|f| f["id"].as_u64().map(|n| n.to_string()).as_deref() == Some(id))
                {
                    Some(fs) => HttpResponse::json(200, &fs),
                    None => HttpResponse::json(404, &json!({"errors": [{"reason": "Not found"}]})),
                }
            }
            ["nfs", "spaces", "7", "filesystems", _, "access-policy"] => match policy {
                PolicyEndpoint::Missing(status) => {
                    HttpResponse::json(status, &json!({"errors": [{"reason": "Not found"}]}))
                }
            },
            _ => HttpResponse::json(404, &json!({"errors": [{"reason": "Not found"}]})),
        }
    };
    let server = linode_nfs_csi::fake::serve("linode-variants", Arc::new(handler)).unwrap();
    Backend { server, seen }
}

impl Backend {
    fn cloud(&self) -> LinodeCloud {
        let mut settings = LinodeSettings::new("token");
        settings.base_url = self.server.url();
        settings.retry = RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            retry_after_cap: Duration::from_millis(10),
        };
        LinodeCloud::new(settings).unwrap()
    }

    fn take_seen(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn ids(found: &[linode_nfs_csi::linode::Filesystem]) -> Vec<u64> {
    found.iter().map(|f| f.id).collect()
}

#[test]
fn a_refused_tag_filter_falls_back_to_the_whole_list_once_and_for_all() {
    let backend = start(TagFilter::Refused, PolicyEndpoint::Missing(404));
    let cloud = backend.cloud();
    let found = cloud.find_filesystems_by_tag(7, MARK).unwrap();
    assert_eq!(ids(&found), [1, 2], "only our filesystems");
    assert_eq!(
        backend.take_seen(),
        [
            "GET /v4beta/nfs/spaces/7/filesystems [filtered]",
            "GET /v4beta/nfs/spaces/7/filesystems",
        ],
        "the refusal is not retried, the whole list follows"
    );
    let again = cloud.find_filesystems_by_tag(7, MARK).unwrap();
    assert_eq!(ids(&again), [1, 2]);
    assert_eq!(
        backend.take_seen(),
        ["GET /v4beta/nfs/spaces/7/filesystems"],
        "the refusal is remembered"
    );
}

#[test]
fn an_ignored_tag_filter_still_reports_only_our_filesystems() {
    let backend = start(TagFilter::Ignored, PolicyEndpoint::Missing(404));
    let found = backend.cloud().find_filesystems_by_tag(7, MARK).unwrap();
    assert_eq!(ids(&found), [1, 2]);
    assert_eq!(
        backend.take_seen(),
        ["GET /v4beta/nfs/spaces/7/filesystems [filtered]"]
    );
}

#[test]
fn nulls_missing_fields_and_capacity_in_stats_decode() {
    let backend = start(TagFilter::Ignored, PolicyEndpoint::Missing(404));
    let cloud = backend.cloud();
    let fs = cloud.get_filesystem(7, 2).unwrap();
    assert_eq!((fs.label.as_str(), fs.region.as_str()), ("", ""));
    assert_eq!(fs.status, Status::default());
    assert!(fs.protocol_versions.is_empty() && fs.mount_target_ips.is_empty());
    assert_eq!(fs.capacity_bytes(), Some(5 << 30));
    assert_eq!(
        cloud.get_filesystem(7, 1).unwrap().capacity_bytes(),
        Some(1 << 30)
    );
    let all = cloud.list_filesystems(7).unwrap();
    assert_eq!(
        ids(&all),
        [1, 2, 3, 4],
        "the item without space_id is skipped"
    );
}

#[test]
fn a_missing_policy_endpoint_is_told_apart_from_a_missing_filesystem() {
    for status in [404, 501] {
        let backend = start(TagFilter::Ignored, PolicyEndpoint::Missing(status));
        let cloud = backend.cloud();
        assert_eq!(
            cloud.get_filesystem_access_policy(7, 1).unwrap(),
            None,
            "{status}: the filesystem exists, the endpoint does not"
        );
        let gone = cloud.get_filesystem_access_policy(7, 99).unwrap_err();
        assert!(gone.is_not_found(), "{status}: {gone:?}");
        // Each read asks again: a policy may appear after its filesystem.
        backend.take_seen();
        assert_eq!(cloud.get_filesystem_access_policy(7, 1).unwrap(), None);
        assert_eq!(
            backend.take_seen(),
            [
                "GET /v4beta/nfs/spaces/7/filesystems/1/access-policy",
                "GET /v4beta/nfs/spaces/7/filesystems/1"
            ],
            "{status}"
        );
    }
}
