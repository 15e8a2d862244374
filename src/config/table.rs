//! The documented variables of the production roles (controller and node),
//! in `--help` order: with `dev.rs`'s, the single source of `--help` and of
//! which flags exist. Only names, defaults and meanings; how a value is
//! checked is `settings.rs`'s.

use super::read::Setting;

/// Everything the controller and node roles read, in `--help` order
/// before the dev role's settings.
pub(super) const SERVING: &[Setting] = &[
    Setting {
        var: "DRIVER_ROLE",
        default: "",
        help: "controller, node or dev (required; `dev` as first argument also selects it)",
    },
    Setting {
        var: "CSI_ENDPOINT",
        default: "unix:///csi/csi.sock",
        help: "unix:///abs/path or tcp://host:port",
    },
    Setting {
        var: "LINODE_TOKEN",
        default: "",
        help: "Linode API token (controller; this or LINODE_TOKEN_FILE is required there, never read by the node; environment only, no flag)",
    },
    Setting {
        var: "LINODE_TOKEN_FILE",
        default: "",
        help: "file holding the Linode API token, e.g. a mounted Secret (controller, instead of LINODE_TOKEN): read again when it changes and when the API refuses the token, so a rotation needs no restart",
    },
    Setting {
        var: "LINODE_URL",
        default: "https://api.linode.com",
        help: "Linode API base URL, without the version",
    },
    Setting {
        var: "LINODE_API_VERSION",
        default: "v4beta",
        help: "Linode API version appended to LINODE_URL",
    },
    Setting {
        var: "LINODE_CA",
        default: "",
        help: "extra root CA PEM file for the Linode API",
    },
    Setting {
        var: "LINODE_REQUEST_TIMEOUT",
        default: "10s",
        help: "timeout of one Linode API request",
    },
    Setting {
        var: "LINODE_WAIT_TIMEOUT",
        default: "5m",
        help: "bound on every wait for a Linode object to become active",
    },
    Setting {
        var: "SPACE_CACHE_TTL",
        default: "60s",
        help: "how long a Storage Space, its mTLS mode and a directory class's shared parent are reused before they are read again (0s: always read)",
    },
    Setting {
        var: "MAINTENANCE_INTERVAL",
        default: "60s",
        help: "controller: how often it tends the pools of shared filesystems (spares, pruning), deletes restores' temporary filesystems that no restore holds, and samples directory volumes' usage and grows those past their autogrow-threshold (0s: never); also how long it trusts its account of a shared parent's quotas before listing them again (a minute when 0s)",
    },
    Setting {
        var: "FILL_TIMEOUT",
        default: "24h",
        help: "controller: how long the job filling a directory volume from a snapshot or a clone may take in all (its waits for the temporary clone and the copy), whoever waits for it; a call waits for it at most LINODE_WAIT_TIMEOUT and a retry joins it",
    },
    Setting {
        var: "FILL_PROGRESS_INTERVAL",
        default: "1m",
        help: "controller: how often a fill of a directory volume tells its claim how far its copy is (an event), and how often the claims of the fills running are listed",
    },
    Setting {
        var: "FILL_CLAIM_GRACE",
        default: "2m",
        help: "controller: how long the claim a directory volume is being filled for may be missing from the claims listed (deleted, or made again under its name) before the fill ends and what it made is removed",
    },
    Setting {
        var: "POOL_EMPTY_GRACE",
        default: "10m",
        help: "controller: how long a pool filesystem the driver made stays empty (no directory, marker or quota) before it is deleted, unless it is a spare",
    },
    Setting {
        var: "ACL_CACHE_MAX_AGE",
        default: "5m",
        help: "node mode: age past which a filesystem ACL the controller knows is read again for ListVolumes and ControllerGetVolume, at most one a second (0s: always read)",
    },
    Setting {
        var: "NFS_ACCESS_POLICY_MODE",
        default: "space",
        help: "space or node (node: ControllerPublish edits the filesystem ACL)",
    },
    Setting {
        var: "DEFAULT_CAPACITY",
        default: "10Gi",
        help: "filesystem size when a request names none (bytes or Ki/Mi/Gi/Ti)",
    },
    Setting {
        var: "VOLUME_EXPANSION",
        default: "off",
        help: "off or subdirectory (controller and dev roles): advertise EXPAND_VOLUME, which grows subdirectory volumes by their quota; whole filesystems cannot grow",
    },
    Setting {
        var: "COPY_THREADS",
        default: "32",
        help: "controller: files copied at once when a subdirectory volume is restored or cloned (1-64); each file costs NFS round trips, so the copy goes as fast as requests are in flight",
    },
    Setting {
        var: "SHARE_MOUNT_DIR",
        default: "/var/lib/linode-nfs-csi/shares",
        help: "controller: where the shared filesystems of subdirectory volumes are mounted (dev role: <DEV_STATE_DIR>/shares unless set)",
    },
    Setting {
        var: "LEASE_NAME",
        default: "linode-nfs-csi-controller",
        help: "controller: the coordination.k8s.io Lease whose holder is the one controller process that writes (the sidecars' leases have other names)",
    },
    Setting {
        var: "LEASE_NAMESPACE",
        default: "",
        help: "controller: the Lease's namespace (default: the service account's, from its namespace file; else kube-system)",
    },
    Setting {
        var: "LEASE_HOLDER_IDENTITY",
        default: "",
        help: "controller: this process's name in the Lease (default: HOSTNAME, the process id and its start time, unique per process)",
    },
    Setting {
        var: "LEASE_DURATION",
        default: "30s",
        help: "controller: how long a Lease nobody renews keeps a standby out (whole seconds); must exceed LEASE_RENEW_DEADLINE plus LINODE_REQUEST_TIMEOUT (unset, it grows to do so)",
    },
    Setting {
        var: "LEASE_RENEW_DEADLINE",
        default: "15s",
        help: "controller: how long the holder goes on writing without a successful renewal",
    },
    Setting {
        var: "LEASE_RETRY_PERIOD",
        default: "3s",
        help: "controller: how often the holder renews the Lease and a standby tries to take it",
    },
    Setting {
        var: "CLUSTER_ID",
        default: "",
        help: "controller: this cluster's identity, on everything the driver makes, so clusters sharing a Storage Space never touch each other's objects (1-16 lowercase letters, digits, inner hyphens; default: derived from the kube-system Namespace's UID; never change it once set)",
    },
    Setting {
        var: "NODE_NAME",
        default: "",
        help: "Kubernetes node name (node role: required; controller: names its Linode when the metadata service does not answer)",
    },
    Setting {
        var: "KUBECONFIG",
        default: "",
        help: "kubeconfig file; unset means the in-cluster service account",
    },
    Setting {
        var: "METADATA_URL",
        default: "http://169.254.169.254",
        help: "Linode metadata service base URL (node)",
    },
    Setting {
        var: "KUBELET_REGISTRATION_DIR",
        default: "",
        help: "node and dev roles: kubelet's plugin registry (e.g. /var/lib/kubelet/plugins_registry); when set the driver registers itself there, no node-driver-registrar needed",
    },
    Setting {
        var: "KUBELET_PLUGIN_ENDPOINT",
        default: "",
        help: "the CSI socket path announced to kubelet when registering (default: the CSI_ENDPOINT path)",
    },
    Setting {
        var: "WORKER_THREADS",
        default: "8",
        help: "size of the RPC worker pool (waits for Linode hold no worker)",
    },
    Setting {
        var: "NFS_MOUNT_HELPER",
        default: "mount",
        help: "program run as `<helper> -t nfs4 [-o opts] <source> <target>`",
    },
    Setting {
        var: "NFS_MOUNT_TIMEOUT",
        default: "2m",
        help: "the NFS mount helper is killed after this long",
    },
    Setting {
        var: "SHUTDOWN_GRACE",
        default: "30s",
        help: "on SIGTERM, how long in-flight RPCs may finish",
    },
    Setting {
        var: "METRICS_ADDRESS",
        default: "",
        help: "serve Prometheus /metrics and /healthz on ip:port, or :port for every address (empty: off)",
    },
];

/// Logging, read by every role; listed last in `--help`.
pub(super) const LOGGING: &[Setting] = &[Setting {
    var: "RUST_LOG",
    default: "info",
    help: "log filter (env_logger syntax)",
}];
