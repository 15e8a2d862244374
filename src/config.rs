//! Every setting the driver reads, read once at startup, and validated
//! before anything is served. Values come from the environment (as on
//! Kubernetes) through the lookup `main` passes in; a flag mirrors each
//! documented variable except `LINODE_TOKEN` (a command line is
//! world-readable), and the variables only a service manager or kubelet set
//! (`NOTIFY_SOCKET`, `KUBERNETES_SERVICE_HOST`/`PORT`) have none. Nothing
//! else in the crate reads the environment for configuration: the `client`
//! subcommand's endpoint is resolved here too ([`client_endpoint`]).
//!
//! This file owns the command line and `--help`; the rest is below it:
//! the production settings in `settings.rs` (documented in `table.rs`),
//! the dev role's and its fake's in `dev.rs` and `quirks.rs`, reading one
//! setting in `read.rs`, the value parsers, shared with the client, in
//! `parse.rs`, and the address types in `address.rs`.

mod address;
mod dev;
mod lease;
mod parse;
mod quirks;
mod read;
mod settings;
mod table;

pub use address::{Endpoint, ListenAddress};
pub use dev::{DevConfig, DevRateLimits};
pub use lease::LeaseSettings;
pub use parse::{
    parse_duration, parse_endpoint, parse_listen_address, parse_plugin_endpoint, parse_quantity,
    parse_url,
};
pub use quirks::DevQuirk;
pub use read::ConfigError;
pub use settings::{
    AccessPolicyMode, Config, FillSettings, LinodeConfig, RegistrationConfig, Role,
    VolumeExpansion, SERVICE_ACCOUNT_DIR,
};

use read::{Lookup, Setting};
use std::collections::BTreeMap;

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Serve(Box<Config>),
    Help,
    Version,
}

/// Every documented setting in `--help` order: the production roles', the
/// dev role's, then logging.
const DOCUMENTED: [&[Setting]; 3] = [table::SERVING, dev::SETTINGS, table::LOGGING];

fn documented() -> impl Iterator<Item = &'static Setting> {
    DOCUMENTED.into_iter().flatten()
}

/// The `--help` text.
pub fn help_text() -> String {
    let mut out = String::from(
        "linode-nfs-csi: Kubernetes CSI driver for Linode managed NFS\n\n\
         Usage: linode-nfs-csi [dev] [--FLAG=VALUE ...]\n\
         Every setting is an environment variable; the flag --lower-case-name\n\
         (e.g. --csi-endpoint for CSI_ENDPOINT) overrides it.\n\n",
    );
    for s in documented() {
        let default = if s.default.is_empty() { "-" } else { s.default };
        out.push_str(&format!(
            "  {:<24} default {:<24} {}\n",
            s.var, default, s.help
        ));
    }
    out
}

/// Parses the process arguments and environment into what to do.
pub fn from_args_and_env(
    args: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, ConfigError> {
    let mut flags: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" | "help" => return Ok(Command::Help),
            "-V" | "--version" | "version" => return Ok(Command::Version),
            "dev" | "controller" | "node" if flags.is_empty() => {
                flags.insert("DRIVER_ROLE", arg.clone());
            }
            other => {
                let Some(flag) = other.strip_prefix("--") else {
                    return Err(ConfigError::new(format!(
                        "unexpected argument {other:?} (see --help)"
                    )));
                };
                let (name, inline) = match flag.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (flag, None),
                };
                let var = name.to_ascii_uppercase().replace('-', "_");
                let Some(setting) = documented().find(|s| s.var == var) else {
                    return Err(ConfigError::new(format!(
                        "unknown flag --{name} (see --help)"
                    )));
                };
                // A command line is world-readable in /proc and `ps`.
                if setting.var == "LINODE_TOKEN" {
                    return Err(ConfigError::new(
                        "LINODE_TOKEN: set it in the environment; a --linode-token flag would show the token to every process on the host",
                    ));
                }
                let value = match inline {
                    Some(v) => v,
                    None => iter
                        .next()
                        .cloned()
                        .ok_or_else(|| ConfigError::new(format!("flag --{name} needs a value")))?,
                };
                flags.insert(setting.var, value);
            }
        }
    }
    let get = |var: &str| -> Option<String> {
        flags
            .get(var)
            .cloned()
            .or_else(|| env(var))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let lookup = Lookup {
        get: &get,
        documented: &DOCUMENTED,
    };
    Config::from_lookup(&lookup).map(|c| Command::Serve(Box::new(c)))
}

/// The endpoint the `client` subcommand dials: `--endpoint`, else
/// `$CSI_ENDPOINT`, else the dev role's socket under the default
/// `DEV_STATE_DIR` (`./dev/csi.sock`).
pub fn client_endpoint(
    flag: Option<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint, String> {
    match flag.or_else(|| env("CSI_ENDPOINT")) {
        Some(raw) => parse_endpoint(&raw),
        None => {
            let unset = |_: &str| None;
            let defaults = Lookup {
                get: &unset,
                documented: &DOCUMENTED,
            };
            dev::socket(&defaults)
                .map(Endpoint::Unix)
                .map_err(|e| e.message)
        }
    }
}

#[cfg(test)]
mod tests;
