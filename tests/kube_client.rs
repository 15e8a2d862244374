//! The Kubernetes client: node reads against the fake API server over plain
//! HTTP (selectors, limits, Status errors, token-file rotation), and the TLS
//! variants of a kubeconfig (CA file vs data, client certificate file vs data,
//! token) against a small rustls server with certificates made by `openssl`.

mod common;

use common::wait_for;
use linode_nfs_csi::fake::{FakeKube, FakeNode};
use linode_nfs_csi::kube::KubeClient;
use linode_nfs_csi::Error;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lnc-kube-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn kubeconfig(dir: &Path, server: &str, cluster_extra: &str, user: &str) -> PathBuf {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
         clusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}\
         contexts:\n- name: ctx\n  context: {{cluster: c, user: u}}\n\
         users:\n- name: u\n  user:\n{user}"
    );
    let path = dir.join("config");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The [`cluster`] and a client of it through a kubeconfig with the right
/// token, in a directory of its own.
fn cluster_and_client(tag: &str) -> (FakeKube, KubeClient, common::TempDir) {
    let fake = cluster();
    let dir = common::TempDir::new(tag);
    let config = kubeconfig(dir.path(), &fake.url(), "", "    token: kube-token\n");
    let client = KubeClient::from_kubeconfig(&config).unwrap();
    (fake, client, dir)
}

fn cluster() -> FakeKube {
    let fake = FakeKube::start("kube-token").unwrap();
    fake.add_node(
        FakeNode::new("cp-1")
            .label("node-role.kubernetes.io/control-plane", "")
            .label("topology.kubernetes.io/region", "us-ord")
            .provider_id("linode://100"),
    );
    for n in 1..=3 {
        fake.add_node(
            FakeNode::new(&format!("worker-{n}"))
                .label("topology.kubernetes.io/region", "us-ord")
                .label("pool", if n == 3 { "b" } else { "a" })
                .provider_id(&format!("linode://{}", 200 + n))
                .address("InternalIP", &format!("10.0.0.{n}")),
        );
    }
    fake
}

fn names(nodes: &[linode_nfs_csi::kube::Node]) -> Vec<&str> {
    nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn nodes_by_name_and_by_selector() {
    let (fake, client, _dir) = cluster_and_client("kube-token");

    let node = client.get_node("worker-2").unwrap();
    assert_eq!(node.provider_id.as_deref(), Some("linode://202"));
    assert_eq!(node.labels["topology.kubernetes.io/region"], "us-ord");

    let workers = client
        .list_nodes("!node-role.kubernetes.io/control-plane", 0)
        .unwrap();
    assert_eq!(names(&workers), ["worker-1", "worker-2", "worker-3"]);
    let one = client
        .list_nodes("!node-role.kubernetes.io/control-plane", 1)
        .unwrap();
    assert_eq!(names(&one), ["worker-1"]);
    assert_eq!(
        names(&client.list_nodes("pool!=a,pool", 0).unwrap()),
        ["worker-3"]
    );
    assert_eq!(client.list_nodes("", 0).unwrap().len(), 4);

    fake.remove_node("worker-1");
    assert_eq!(names(&one_worker(&client)), ["worker-2"]);
}

fn one_worker(client: &KubeClient) -> Vec<linode_nfs_csi::kube::Node> {
    client
        .list_nodes("!node-role.kubernetes.io/control-plane", 1)
        .unwrap()
}

#[test]
fn status_errors_map_to_outcomes() {
    let (fake, client, dir) = cluster_and_client("kube-errors");
    let err = client.get_node("ghost").unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    assert!(err.message().contains("nodes \"ghost\" not found"), "{err}");

    let err = client.list_nodes("a in (b)", 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");

    fake.fail_next(503, 1);
    assert!(matches!(
        client.get_node("worker-1").unwrap_err(),
        Error::Unavailable(_)
    ));
    fake.fail_next(403, 1);
    assert!(matches!(
        client.get_node("worker-1").unwrap_err(),
        Error::PermissionDenied(_)
    ));
    assert!(client.get_node("worker-1").is_ok());

    let stranger = KubeClient::from_kubeconfig(&kubeconfig(
        dir.path(),
        &fake.url(),
        "",
        "    token: nope\n",
    ))
    .unwrap();
    let err = stranger.get_node("worker-1").unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert!(!err.message().contains("nope"), "no token in errors: {err}");

    let down = KubeClient::from_kubeconfig(&kubeconfig(
        dir.path(),
        &linode_nfs_csi::fake::unreachable_url(),
        "",
        "    token: kube-token\n",
    ))
    .unwrap();
    assert!(matches!(
        down.get_node("x").unwrap_err(),
        Error::Unavailable(_)
    ));
}

#[test]
fn unsupported_auth_fails_at_construction() {
    let dir = temp_dir("exec");
    let path = kubeconfig(
        &dir,
        "https://127.0.0.1:1",
        "",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n",
    );
    let err = KubeClient::from_kubeconfig(&path).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(err.message().contains("exec"), "{err}");
    let missing = KubeClient::new(Some(&dir.join("absent")), None).unwrap_err();
    assert!(matches!(missing, Error::InvalidArgument(_)));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn token_files_are_re_read_after_the_refresh_interval() {
    let fake = cluster();
    let dir = temp_dir("rotate");
    // In-cluster layout; the CA is only used for https, so any PEM will do here.
    std::fs::write(
        dir.join("ca.crt"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(dir.join("token"), "kube-token\n").unwrap();
    let client = KubeClient::in_cluster(&fake.url(), &dir, Duration::from_secs(1)).unwrap();
    assert!(client.get_node("worker-1").is_ok());

    fake.set_token("rotated-token");
    std::fs::write(dir.join("token"), "rotated-token").unwrap();
    let mut denied = 0;
    wait_for(
        "the rotated token",
        Duration::from_secs(10),
        || match client.get_node("worker-1") {
            Ok(_) => true,
            Err(Error::PermissionDenied(_)) => {
                denied += 1;
                false
            }
            Err(e) => panic!("rotation never picked up: {e:?}"),
        },
    );
    assert!(
        denied > 0,
        "the cached token is used until the refresh interval"
    );

    // The kubeconfig tokenFile goes through the same reader.
    std::fs::write(dir.join("user-token"), "rotated-token\n").unwrap();
    let path = kubeconfig(&dir, &fake.url(), "", "    tokenFile: user-token\n");
    assert!(KubeClient::from_kubeconfig(&path)
        .unwrap()
        .get_node("worker-1")
        .is_ok());
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- TLS ------------------------------------------------------------------

struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn pem(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    fn b64(&self, name: &str) -> String {
        base64(&self.pem(name))
    }
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Two CAs (`ca`, `other-ca`), a server certificate for 127.0.0.1 and a
/// client certificate, all from `ca`. `None` when `openssl` is missing.
fn make_pki(name: &str) -> Option<Pki> {
    let dir = temp_dir(name);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        let (key, crt, subj) = (
            format!("{ca}.key"),
            format!("{ca}.crt"),
            format!("/CN={ca}"),
        );
        args.extend([
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &subj,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        if !openssl(&dir, &args) {
            eprintln!("openssl unavailable: TLS variants not exercised");
            return None;
        }
    }
    for (leaf, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let ext_file = format!("{leaf}.ext");
        std::fs::write(
            dir.join(&ext_file),
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{ext}"),
        )
        .unwrap();
        let (key, csr, crt, subj) = (
            format!("{leaf}.key"),
            format!("{leaf}.csr"),
            format!("{leaf}.crt"),
            format!("/CN={leaf}"),
        );
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        assert!(openssl(&dir, &req), "openssl req {leaf}");
        assert!(openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext_file,
            ]
        ));
    }
    Some(Pki { dir })
}

fn der_items(pem: &[u8]) -> Vec<ureq::tls::PemItem<'static>> {
    ureq::tls::parse_pem(pem).map(Result::unwrap).collect()
}

/// An HTTPS API server answering every GET with worker-1, to requests that
/// carry either `Bearer kube-token` or a client certificate from `ca`.
/// Returns its URL and how many requests it authorised.
fn tls_server(pki: &Pki) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = |name: &str| -> CertificateDer<'static> {
        match der_items(&pki.pem(name)).remove(0) {
            ureq::tls::PemItem::Certificate(c) => CertificateDer::from(c.der().to_vec()),
            _ => panic!("{name} is not a certificate"),
        }
    };
    let key = match der_items(&pki.pem("server.key")).remove(0) {
        ureq::tls::PemItem::PrivateKey(k) => {
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(k.der().to_vec()))
        }
        _ => panic!("server.key is not a key"),
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert("ca.crt")).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![cert("server.crt")], key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let count = Arc::clone(&count);
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return, // handshake refused by the client, or EOF
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let cert_ok = tls.conn.peer_certificates().is_some_and(|c| !c.is_empty());
                let token_ok = head.contains("authorization: bearer kube-token\r\n");
                let (status, body) = if cert_ok || token_ok {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    (
                        "200 OK",
                        r#"{"metadata":{"name":"worker-1"},"spec":{"providerID":"linode://201"}}"#,
                    )
                } else {
                    (
                        "401 Unauthorized",
                        r#"{"kind":"Status","message":"Unauthorized","code":401}"#,
                    )
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes());
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (url, served)
}

#[test]
fn tls_kubeconfig_variants() {
    let Some(pki) = make_pki("tls") else {
        return;
    };
    let (url, served) = tls_server(&pki);
    let ca_file = format!(
        "    certificate-authority: {}\n",
        pki.path("ca.crt").display()
    );
    let ca_data = format!("    certificate-authority-data: {}\n", pki.b64("ca.crt"));
    let cert_files = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    );
    let cert_data = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        pki.b64("client.crt"),
        pki.b64("client.key")
    );
    let token = "    token: kube-token\n".to_string();
    let cases = [
        ("CA file + client cert files", &ca_file, &cert_files),
        ("CA data + client cert data", &ca_data, &cert_data),
        ("CA data + token", &ca_data, &token),
    ];
    let work = temp_dir("tls-configs");
    for (what, ca, user) in cases {
        let client = KubeClient::from_kubeconfig(&kubeconfig(&work, &url, ca, user)).unwrap();
        let node = client
            .get_node("worker-1")
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(node.provider_id.as_deref(), Some("linode://201"), "{what}");
    }
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 3);

    let no_auth =
        KubeClient::from_kubeconfig(&kubeconfig(&work, &url, &ca_data, "    {}\n")).unwrap();
    assert!(matches!(
        no_auth.get_node("worker-1").unwrap_err(),
        Error::PermissionDenied(_)
    ));

    let wrong_ca = format!(
        "    certificate-authority-data: {}\n",
        pki.b64("other-ca.crt")
    );
    let untrusted =
        KubeClient::from_kubeconfig(&kubeconfig(&work, &url, &wrong_ca, &token)).unwrap();
    let err = untrusted.get_node("worker-1").unwrap_err();
    assert!(
        matches!(err, Error::Unavailable(_)),
        "server cert not trusted: {err:?}"
    );

    // In-cluster: CA from the service-account folder, token from its file.
    let sa = temp_dir("tls-sa");
    std::fs::copy(pki.path("ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("token"), "kube-token").unwrap();
    let in_cluster = KubeClient::in_cluster(&url, &sa, Duration::from_secs(60)).unwrap();
    assert_eq!(in_cluster.get_node("worker-1").unwrap().name, "worker-1");

    for d in [&work, &sa, &pki.dir] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// LINODE_CA shares this PKI: the Linode client must trust an extra CA (a
/// private proxy's) and refuse a server its roots cannot verify.
#[test]
fn linode_ca_is_trusted_by_the_linode_client() {
    use linode_nfs_csi::linode::{Cloud, LinodeCloud, LinodeSettings};
    let Some(pki) = make_pki("linode-ca") else {
        return;
    };
    let (url, served) = tls_server(&pki);
    let client = |ca: Option<PathBuf>| {
        let mut settings = LinodeSettings::new("kube-token");
        settings.base_url = url.clone();
        settings.ca_file = ca;
        LinodeCloud::new(settings).unwrap()
    };
    let count = || served.load(std::sync::atomic::Ordering::SeqCst);

    // Without the CA the handshake fails before any request is served.
    let err = client(None).get_space(7).unwrap_err();
    assert_eq!(count(), 0, "{err:?}");
    let err = client(Some(pki.path("other-ca.crt")))
        .get_space(7)
        .unwrap_err();
    assert_eq!(count(), 0, "{err:?}");
    // With it the request reaches the server (whose answer is not a Space).
    let _ = client(Some(pki.path("ca.crt"))).get_space(7);
    assert_eq!(count(), 1);
}

#[test]
fn claims_are_listed_patched_as_the_api_server_allows_and_get_events() {
    use linode_nfs_csi::fake::FakeStorageClass;
    use linode_nfs_csi::kube::EventType;
    const GIB: i64 = 1 << 30;
    let (fake, client, _dir) = cluster_and_client("claims");
    fake.add_storage_class(FakeStorageClass::new("grows", "d", &[]).expandable());
    fake.add_storage_class(FakeStorageClass::new("fixed", "d", &[]));
    fake.add_claim("a", "data", "grows", Some("pvc-1"), GIB);
    fake.add_claim("b", "logs", "fixed", Some("pvc-2"), GIB);
    fake.add_claim("b", "waiting", "grows", None, GIB);

    let claims = client.list_claims().unwrap();
    let names: Vec<String> = claims
        .iter()
        .map(|c| format!("{}/{}", c.namespace, c.name))
        .collect();
    assert_eq!(names, ["a/data", "b/logs", "b/waiting"]);
    assert_eq!(fake.claim_lists(), 1);
    let data = claims[0].clone();
    assert_eq!(
        (data.requested, data.capacity, data.volume_name.as_deref()),
        (Some(GIB), Some(GIB), Some("pvc-1"))
    );

    let grown = client.request_claim_storage(&data, 2 * GIB).unwrap();
    assert_eq!(grown.requested, Some(2 * GIB));
    assert_eq!(client.get_claim("a", "data").unwrap(), grown);
    // The claim as first read is stale now: a patch of it is refused.
    let stale = client.request_claim_storage(&data, 3 * GIB).unwrap_err();
    assert!(matches!(stale, Error::FailedPrecondition(_)), "{stale:?}");
    // Below what is in force, or on a class that does not grow: refused.
    let shrink = client.request_claim_storage(&grown, GIB / 2).unwrap_err();
    assert!(matches!(shrink, Error::InvalidArgument(_)), "{shrink:?}");
    let fixed = client
        .request_claim_storage(&claims[1], 2 * GIB)
        .unwrap_err();
    assert!(matches!(fixed, Error::InvalidArgument(_)), "{fixed:?}");
    let pending = client
        .request_claim_storage(&claims[2], 2 * GIB)
        .unwrap_err();
    assert!(matches!(pending, Error::InvalidArgument(_)), "{pending:?}");
    assert_eq!(fake.claim("b", "logs").unwrap().requested, Some(GIB));
    assert!(matches!(
        client.get_claim("a", "gone"),
        Err(Error::NotFound(_))
    ));

    client
        .claim_event(&grown, EventType::Warning, "AutogrowNoRoom", "full")
        .unwrap();
    let events = fake.claim_events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0].namespace.as_str(),
            events[0].claim.as_str(),
            events[0].kind.as_str(),
            events[0].reason.as_str(),
            events[0].message.as_str()
        ),
        ("a", "data", "Warning", "AutogrowNoRoom", "full")
    );
}

#[test]
fn what_users_and_the_resizer_write_of_a_claim_the_fake_serves_over_http() {
    let (fake, client, _dir) = cluster_and_client("claim-writes");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let send = |method: &str, path: &str, content_type: &str, body: &str| {
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", fake.url()))
            .header("Authorization", "Bearer kube-token")
            .header("Content-Type", content_type)
            .body(body.to_string())
            .unwrap();
        agent.run(request).unwrap().status().as_u16()
    };
    let claims = "/api/v1/namespaces/a/persistentvolumeclaims";
    let made = r#"{"metadata": {"name": "data", "annotations": {"x": "1"}},
        "spec": {"volumeName": "pvc-1", "storageClassName": "c",
                 "resources": {"requests": {"storage": "1Gi"}}}}"#;
    assert_eq!(send("POST", claims, "application/json", made), 201);
    assert_eq!(send("POST", claims, "application/json", made), 409);
    let claim = client.get_claim("a", "data").unwrap();
    assert_eq!((claim.requested, claim.capacity), (Some(1 << 30), None));
    // kubectl annotate: a merge patch; null removes.
    let annotate =
        r#"{"metadata": {"annotations": {"linodenfs.csi.linode.com/autogrow": "off", "x": null}}}"#;
    let merge = "application/merge-patch+json";
    assert_eq!(
        send("PATCH", &format!("{claims}/data"), merge, annotate),
        200
    );
    // The binder's and the resizer's writes of the status.
    let status = r#"{"status": {"capacity": {"storage": "1Gi"},
        "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"}}}"#;
    assert_eq!(
        send("PATCH", &format!("{claims}/data/status"), merge, status),
        200
    );
    let claim = fake.claim("a", "data").unwrap();
    assert_eq!(
        claim.annotations.into_iter().collect::<Vec<_>>(),
        [(
            "linodenfs.csi.linode.com/autogrow".to_string(),
            "off".to_string()
        )]
    );
    assert_eq!(claim.capacity, Some(1 << 30));
    assert_eq!(
        claim.resize_status.as_deref(),
        Some("ControllerResizeInfeasible")
    );
    let cleared = r#"{"status": {"allocatedResourceStatuses": {"storage": null}}}"#;
    assert_eq!(
        send("PATCH", &format!("{claims}/data/status"), merge, cleared),
        200
    );
    assert_eq!(fake.claim("a", "data").unwrap().resize_status, None);
    // An admin's StorageClass, which says whether its claims may grow.
    let class = r#"{"metadata": {"name": "c"}, "provisioner": "d", "allowVolumeExpansion": true}"#;
    let classes = "/apis/storage.k8s.io/v1/storageclasses";
    assert_eq!(send("POST", classes, "application/json", class), 201);
    let listed = client.list_storage_classes().unwrap();
    assert!(listed
        .iter()
        .any(|c| c.name == "c" && c.allow_volume_expansion));
}
