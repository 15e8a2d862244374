//! Where the Kubernetes API server is and how to authenticate to it: the
//! current context of a kubeconfig (files read, `*-data` decoded) or the
//! in-cluster service account's CA. It resolves settings only; it never
//! connects.

use serde::Deserialize;
use std::path::{Path, PathBuf};

pub use crate::config::SERVICE_ACCOUNT_DIR;

/// TLS and credentials resolved from a kubeconfig, before any connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(super) server: String,
    pub(super) ca_pem: Option<Vec<u8>>,
    pub(super) insecure: bool,
    pub(super) token: Option<TokenSource>,
    pub(super) client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TokenSource {
    Inline(String),
    File(PathBuf),
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context")]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    users: Vec<NamedUser>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority")]
    ca_file: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    ca_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure: bool,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    user: Option<String>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize, Default)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(rename = "client-certificate")]
    cert_file: Option<String>,
    #[serde(rename = "client-certificate-data")]
    cert_data: Option<String>,
    #[serde(rename = "client-key")]
    key_file: Option<String>,
    #[serde(rename = "client-key-data")]
    key_data: Option<String>,
    exec: Option<serde_yaml_ng::Value>,
    #[serde(rename = "auth-provider")]
    auth_provider: Option<serde_yaml_ng::Value>,
    username: Option<String>,
}

pub(super) fn bad_config(msg: String) -> crate::Error {
    crate::Error::InvalidArgument(format!("kubeconfig: {msg}"))
}

/// How a file a kubeconfig names is read: `std::fs::read`, except in the
/// fuzz target (`crate::fuzzing`), whose arbitrary paths must not reach the
/// host's files.
pub(crate) type ReadFile<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>;

/// Inline `*-data` (base64) or a file (relative to the kubeconfig's folder).
fn material(
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
    what: &str,
    read: ReadFile,
) -> crate::Result<Option<Vec<u8>>> {
    if let Some(data) = data {
        return base64_decode(data)
            .map(Some)
            .ok_or_else(|| bad_config(format!("{what}-data is not valid base64")));
    }
    match file {
        Some(f) => {
            let path = dir.join(f);
            read(&path)
                .map(Some)
                .map_err(|e| bad_config(format!("{what} {}: {e}", path.display())))
        }
        None => Ok(None),
    }
}

/// The current context's cluster and user, files read, data decoded.
fn resolve_kubeconfig(yaml: &str, dir: &Path) -> crate::Result<Target> {
    resolve_kubeconfig_with(yaml, dir, &|path| std::fs::read(path))
}

/// `resolve_kubeconfig` with the named files read by `read`.
pub(crate) fn resolve_kubeconfig_with(
    yaml: &str,
    dir: &Path,
    read: ReadFile,
) -> crate::Result<Target> {
    let config: Kubeconfig =
        serde_yaml_ng::from_str(yaml).map_err(|e| bad_config(format!("cannot parse: {e}")))?;
    let context_name = config
        .current_context
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad_config("no current-context".to_string()))?;
    let context = config
        .contexts
        .into_iter()
        .find(|c| c.name == context_name)
        .ok_or_else(|| bad_config(format!("context {context_name:?} not found")))?
        .context;
    let cluster = config
        .clusters
        .into_iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| bad_config(format!("cluster {:?} not found", context.cluster)))?
        .cluster;
    let user = match &context.user {
        Some(name) if !name.is_empty() => {
            config
                .users
                .into_iter()
                .find(|u| &u.name == name)
                .ok_or_else(|| bad_config(format!("user {name:?} not found")))?
                .user
        }
        _ => User::default(),
    };
    let user_name = context.user.unwrap_or_default();
    let unsupported = |what: &str| {
        bad_config(format!(
            "user {user_name:?} uses {what}, which this driver does not support; \
             use a token, tokenFile or client certificate"
        ))
    };
    if user.exec.is_some() {
        return Err(unsupported("an exec credential plugin"));
    }
    if user.auth_provider.is_some() {
        return Err(unsupported("an auth-provider"));
    }
    if user.username.is_some() {
        return Err(unsupported("basic authentication"));
    }
    let pem = |data: &Option<String>, file: &Option<String>, what| {
        material(data.as_deref(), file.as_deref(), dir, what, read)
    };
    let ca_pem = pem(&cluster.ca_data, &cluster.ca_file, "certificate-authority")?;
    let cert = pem(&user.cert_data, &user.cert_file, "client-certificate")?;
    let key = pem(&user.key_data, &user.key_file, "client-key")?;
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(bad_config(format!(
                "user {user_name:?} has a client certificate without a key or vice versa"
            )))
        }
    };
    let token = match (user.token.filter(|t| !t.is_empty()), user.token_file) {
        (Some(t), _) => Some(TokenSource::Inline(t)),
        (None, Some(f)) => Some(TokenSource::File(dir.join(f))),
        (None, None) => None,
    };
    Ok(Target {
        server: cluster.server.trim_end_matches('/').to_string(),
        ca_pem,
        insecure: cluster.insecure,
        token,
        client_cert,
    })
}

/// The in-cluster API server at `server`, trusted through the service
/// account's CA in `sa_dir`; the token is the client's to read.
pub(super) fn in_cluster(server: &str, sa_dir: &Path) -> crate::Result<Target> {
    let ca_path = sa_dir.join("ca.crt");
    let ca_pem = std::fs::read(&ca_path).map_err(|e| {
        crate::Error::InvalidArgument(format!("service account CA {}: {e}", ca_path.display()))
    })?;
    Ok(Target {
        server: server.trim_end_matches('/').to_string(),
        ca_pem: Some(ca_pem),
        insecure: false,
        token: None,
        client_cert: None,
    })
}

/// The current context of the kubeconfig at `path`.
pub(super) fn from_file(path: &Path) -> crate::Result<Target> {
    let yaml = std::fs::read_to_string(path)
        .map_err(|e| bad_config(format!("{}: {e}", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    resolve_kubeconfig(&yaml, dir)
}

/// Standard base64, with or without padding, whitespace ignored (kubeconfig
/// writers wrap long `*-data` values).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(compact).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lnc-kube-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const BASE: &str = r#"
apiVersion: v1
kind: Config
current-context: blue
clusters:
- name: other
  cluster: {server: "https://other:6443"}
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTg==
contexts:
- name: green
  context: {cluster: other, user: nobody}
- name: blue
  context: {cluster: c1, user: u1}
users:
"#;

    fn with_user(user: &str) -> String {
        format!("{BASE}- name: u1\n  user:\n{user}")
    }

    #[test]
    fn token_user_and_ca_data() {
        let t = resolve_kubeconfig(&with_user("    token: abc\n"), Path::new("/x")).unwrap();
        assert_eq!(t.server, "https://10.0.0.1:6443");
        assert_eq!(t.ca_pem.as_deref(), Some(&b"-----BEGIN"[..]));
        assert_eq!(t.token, Some(TokenSource::Inline("abc".into())));
        assert_eq!(t.client_cert, None);
        assert!(!t.insecure);
    }

    #[test]
    fn token_file_is_relative_to_the_kubeconfig() {
        let t = resolve_kubeconfig(&with_user("    tokenFile: tok\n"), Path::new("/cfg")).unwrap();
        assert_eq!(t.token, Some(TokenSource::File(PathBuf::from("/cfg/tok"))));
    }

    #[test]
    fn client_certificate_files_and_ca_file() {
        let dir = temp_dir("files");
        std::fs::write(dir.join("cert.pem"), "CERT").unwrap();
        std::fs::write(dir.join("key.pem"), "KEY").unwrap();
        std::fs::write(dir.join("ca.pem"), "CA").unwrap();
        let yaml = with_user("    client-certificate: cert.pem\n    client-key: key.pem\n")
            .replace(
                "certificate-authority-data: LS0tLS1CRUdJTg==",
                "certificate-authority: ca.pem",
            );
        let t = resolve_kubeconfig(&yaml, &dir).unwrap();
        assert_eq!(t.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(t.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
        assert_eq!(t.token, None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn client_certificate_data() {
        let t = resolve_kubeconfig(
            &with_user("    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n"),
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!(t.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
    }

    #[test]
    fn unsupported_and_broken_configs_fail_clearly() {
        let table = [
            (with_user("    exec: {command: aws}\n"), "exec"),
            (
                with_user("    auth-provider: {name: gcp}\n"),
                "auth-provider",
            ),
            (with_user("    username: a\n    password: b\n"), "basic"),
            (
                with_user("    client-certificate-data: Q0VSVA==\n"),
                "without a key",
            ),
            (
                with_user("    client-key-data: '%%%'\n    client-certificate-data: Q0VSVA==\n"),
                "base64",
            ),
            (
                BASE.replace("current-context: blue", "current-context: nope"),
                "\"nope\" not found",
            ),
            (
                BASE.replace("current-context: blue\n", ""),
                "no current-context",
            ),
            (
                BASE.replace("cluster: c1,", "cluster: gone,"),
                "\"gone\" not found",
            ),
            (
                format!("{BASE}- name: someone-else\n  user: {{token: x}}\n"),
                "user \"u1\" not found",
            ),
            ("[not, a, mapping".to_string(), "cannot parse"),
        ];
        for (yaml, needle) in table {
            let err = resolve_kubeconfig(&yaml, Path::new("/x")).unwrap_err();
            assert!(matches!(err, crate::Error::InvalidArgument(_)), "{err:?}");
            assert!(err.message().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn base64_variants() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8=\n").unwrap(), b"hello");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("aGVs*G8="), None);
        assert_eq!(base64_decode("aG=Vs"), None);
    }
}
