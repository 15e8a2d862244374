//! The value parsers of the settings (durations, sizes, URLs, endpoints,
//! listen addresses), shared by [`super`] and the `client` subcommand. Each
//! takes the raw text and says what is wrong with it; naming the variable is
//! the caller's job.

use super::address::{Endpoint, ListenAddress};
use std::path::PathBuf;
use std::time::Duration;

/// The socket kubelet dials: an absolute path. kubelet takes the announced
/// endpoint as a plain path, so a `unix://` prefix is dropped here rather
/// than announced.
pub fn parse_plugin_endpoint(raw: &str) -> Result<PathBuf, String> {
    socket_path(raw.strip_prefix("unix://").unwrap_or(raw)).ok_or_else(|| {
        format!(
            "invalid endpoint {raw:?}: want the absolute path of the CSI socket as kubelet sees it"
        )
    })
}

/// `path` when it can name a socket: absolute, not the root, not a directory.
fn socket_path(path: &str) -> Option<PathBuf> {
    (path.starts_with('/') && path.len() >= 2 && !path.ends_with('/')).then(|| PathBuf::from(path))
}

/// `500ms`, `10s`, `5m`, `1h`; a bare number is rejected so units are never guessed.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("invalid duration {raw:?}: add a unit (ms, s, m or h)"))?;
    let (number, unit) = raw.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {raw:?}: expected e.g. 500ms, 10s, 5m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "invalid duration {raw:?}: unit must be ms, s, m or h"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {raw:?}: too large"))
}

/// An `http://` or `https://` base URL with a host, trailing `/` dropped.
pub fn parse_url(raw: &str) -> Result<String, String> {
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or_else(|| format!("invalid URL {raw:?}: want http://host or https://host"))?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err(format!("invalid URL {raw:?}: no host"));
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// `unix:///abs/path` or `tcp://host:port`.
pub fn parse_endpoint(raw: &str) -> Result<Endpoint, String> {
    if let Some(path) = raw.strip_prefix("unix://") {
        return socket_path(path).map(Endpoint::Unix).ok_or_else(|| {
            format!("invalid endpoint {raw:?}: want unix:///absolute/path/to/socket")
        });
    }
    if let Some(addr) = raw.strip_prefix("tcp://") {
        let port_ok = addr
            .rsplit_once(':')
            .map(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            .unwrap_or(false);
        if !port_ok {
            return Err(format!("invalid endpoint {raw:?}: want tcp://host:port"));
        }
        return Ok(Endpoint::Tcp(addr.to_string()));
    }
    Err(format!(
        "invalid endpoint {raw:?}: scheme must be unix:// or tcp://"
    ))
}

/// `ip:port`, `[ipv6]:port` or `:port`. A name is refused rather than
/// resolved. An IPv6 address without brackets is taken when the port after
/// its last colon leaves a valid address, as `$(POD_IP):port` in a manifest
/// gives on an IPv6 cluster.
pub fn parse_listen_address(raw: &str) -> Result<ListenAddress, String> {
    let invalid =
        || format!("invalid address {raw:?}: want ip:port or :port (e.g. 127.0.0.1:29662)");
    if let Ok(addr) = raw.parse::<std::net::SocketAddr>() {
        return Ok(ListenAddress {
            ip: Some(addr.ip()),
            port: addr.port(),
        });
    }
    let (host, port) = raw.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse::<u16>().map_err(|_| invalid())?;
    let ip = match host {
        "" => None,
        _ => Some(
            host.parse::<std::net::Ipv6Addr>()
                .map_err(|_| invalid())?
                .into(),
        ),
    };
    Ok(ListenAddress { ip, port })
}

/// A size as bytes or with a binary suffix (`Ki`, `Mi`, `Gi`, `Ti`), as in Kubernetes quantities.
pub fn parse_quantity(raw: &str) -> Result<i64, String> {
    let raw = raw.trim();
    let (number, factor) = [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ]
    .iter()
    .find_map(|(suffix, f)| raw.strip_suffix(suffix).map(|n| (n, *f)))
    .unwrap_or((raw, 1));
    number
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| {
            format!("invalid size {raw:?}: want a positive number of bytes or e.g. 10Gi")
        })
}
