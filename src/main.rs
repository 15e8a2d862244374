//! Entry point: parse flags and environment into a Config, start the role,
//! map startup errors to an exit code with one clear line.

use linode_nfs_csi::config::{self, Command};
use linode_nfs_csi::{client, dev, identity, server};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The client keeps the default signal handling, so Ctrl-C stops it.
    if args.first().map(String::as_str) == Some("client") {
        match client::run(&args[1..], |k| std::env::var(k).ok()) {
            Ok(out) => print!("{out}"),
            Err(e) => {
                eprintln!("linode-nfs-csi client: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    // Before any thread exists, so every thread inherits the blocked mask.
    let signals = server::StopSignals::block();
    let config = match config::from_args_and_env(&args, |k| std::env::var(k).ok()) {
        Ok(Command::Serve(config)) => *config,
        Ok(Command::Help) => {
            print!("{}", config::help_text());
            return;
        }
        Ok(Command::Version) => {
            println!("linode-nfs-csi {}", identity::version());
            return;
        }
        Err(e) => {
            eprintln!("linode-nfs-csi: {e}");
            std::process::exit(e.exit_code);
        }
    };
    if config.role == config::Role::Dev {
        if let Err(e) = dev::ensure_mount_privileges() {
            eprintln!("linode-nfs-csi: {e}");
            std::process::exit(1);
        }
    }
    env_logger::Builder::new()
        .parse_filters(&config.log_filter)
        // ureq documents that its trace output is not redacted, and its
        // debug output is per-request noise: our client logs what matters.
        .filter_module("ureq", log::LevelFilter::Warn)
        .filter_module("ureq_proto", log::LevelFilter::Warn)
        .filter_module("rustls", log::LevelFilter::Warn)
        .format_timestamp_millis()
        .init();
    grpcio::redirect_log();
    if let Err(e) = server::run(config, signals) {
        log::error!("{e}");
        eprintln!("linode-nfs-csi: {e}");
        std::process::exit(1);
    }
}
