//! Who the driver is: its CSI name and the version it was built as. Read by
//! the Identity service, the metrics' build-info series, kubelet
//! registration and the logs; it depends on nothing in the crate, so any
//! module may use it.

pub const DRIVER_NAME: &str = "linodenfs.csi.linode.com";

/// The git revision the binary was built from; empty when unknown.
pub fn revision() -> &'static str {
    env!("GIT_REVISION")
}

/// Crate version plus the git revision it was built from, when known.
pub fn version() -> String {
    let rev = revision();
    if rev.is_empty() {
        env!("CARGO_PKG_VERSION").to_string()
    } else {
        format!("{}+{rev}", env!("CARGO_PKG_VERSION"))
    }
}
