#!/usr/bin/env bash
# Renders the base, every overlay, the components together and the
# examples with `kubectl kustomize`, then validates every rendered object
# against the Kubernetes OpenAPI schemas with kubernetes-validate (PyPI), whose
# schemas ship inside the package: nothing is downloaded at run time, and the
# validation runs in an empty network namespace when that is possible to
# prove it.
#
# Install:  python3 -m pip install kubernetes-validate==1.37.0
#
# Versions: 1.34 is the oldest Kubernetes csi-provisioner v6 supports; the
# newest is the newest schema set the package ships. Both have
# VolumeAttributesClass as storage.k8s.io/v1 (GA in 1.34), so the example
# class is validated, not skipped.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSIONS=${K8S_VERSIONS:-"1.34.0 1.37.0"}
# CRDs have no schema in the package; tests/kustomize.rs checks their fields.
# The group snapshot kinds are allowed at v1 only, the version csi-snapshotter
# v8.6.0 reads (components/snapshots). The example ServiceMonitor is the
# Prometheus Operator's CRD, skipped here on purpose for the same reason.
ALLOWED_MISSING='^WARN .* Couldn.t find schema for kind ((VolumeSnapshotClass|VolumeSnapshot) with api version snapshot\.storage\.k8s\.io/v1|(VolumeGroupSnapshotClass|VolumeGroupSnapshot) with api version groupsnapshot\.storage\.k8s\.io/v1|ServiceMonitor with api version monitoring\.coreos\.com/v1) '

fail() { printf 'kustomize/check.sh: %s\n' "$*" >&2; exit 1; }

command -v kubectl >/dev/null || fail "kubectl not found (it renders the kustomizations)"
command -v kubernetes-validate >/dev/null ||
    fail "kubernetes-validate not found; install it with: python3 -m pip install kubernetes-validate==1.37.0"
echo "schema validator: kubernetes-validate $(kubernetes-validate --version 2>&1 | awk '{print $NF}') (bundled schemas), strict mode, Kubernetes $K8S_VERSIONS"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

render() {
    local name=$1 dir=$2
    kubectl kustomize "$dir" >"$out/$name.yaml" || fail "kubectl kustomize $dir failed"
    printf '  rendered %-28s %3d objects\n' "$name" "$(grep -c '^kind:' "$out/$name.yaml")"
}

echo "rendering:"
render base "$here/base"
for overlay in "$here"/overlays/*/; do
    render "overlay-$(basename "$overlay")" "$overlay"
done
# The components are meant to combine; an overlay of our own proves they do.
combo="$out/combo"
mkdir "$combo"
rel=$(realpath --relative-to="$combo" "$here")
cat >"$combo/kustomization.yaml" <<EOF
resources: [$rel/base]
components: [$rel/components/node-access, $rel/components/snapshots]
EOF
render node-access+snapshots "$combo"
# node-image takes the node DaemonSet away; the others must still apply.
combo3="$out/combo3"
mkdir "$combo3"
cat >"$combo3/kustomization.yaml" <<EOF
resources: [$rel/base]
components: [$rel/components/node-access, $rel/components/snapshots, $rel/components/node-image, $rel/components/metrics, $rel/components/subdirectory]
EOF
render all-components "$combo3"
render examples "$here/examples"
render examples-metrics "$here/examples/metrics"

# Offline proof: unshare gives an empty network namespace (root only).
netless=()
if [[ $(id -u) == 0 ]] && unshare --net true 2>/dev/null; then
    netless=(unshare --net)
    echo "validating inside an empty network namespace"
fi

status=0
for version in $K8S_VERSIONS; do
    version_ok=1
    for file in "$out"/*.yaml; do
        log="$file.$version.log"
        bad=0
        "${netless[@]}" kubernetes-validate --strict --quiet -k "$version" "$file" >"$log" 2>&1 || bad=1
        # Any warning other than the known CRD kinds means an object was not
        # checked at all (a typo in apiVersion looks exactly like that).
        if grep -v -E "$ALLOWED_MISSING" "$log" | grep -q -E '^(WARN|ERROR)'; then bad=1; fi
        if ((bad)); then
            echo "$(basename "$file") against $version:"
            cat "$log"
            status=1
            version_ok=0
        fi
    done
    ((version_ok == 0)) || echo "  all objects valid against Kubernetes $version"
done
((status == 0)) || fail "schema validation failed"
echo "kustomize check passed"
