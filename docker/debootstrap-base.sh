#!/bin/sh
# A base image for docker/Dockerfile built without any image registry: Debian from the
# distribution's mirror (debootstrap --variant=minbase), python3 and its venv module, the
# host's CA certificates, imported with `docker import`. Needs root, debootstrap and a
# running Docker engine. Prints the image's tag on stdout (progress goes to stderr):
#
#   docker build --build-arg BASE_IMAGE="$(sudo docker/debootstrap-base.sh)" -t mq:dev -f docker/Dockerfile .
#
# Cached: the tag (mq-base:SUITE-KEY) is keyed by the suite, mirror, packages, this script,
# the host's CA bundle and the month (security updates); an image with that tag is reused
# and nothing is downloaded. Environment: MQ_BASE_SUITE (bookworm), MQ_BASE_MIRROR (the
# first Debian mirror apt uses here, else deb.debian.org), MQ_BASE_REBUILD=1 (build anyway).
set -eu

suite=${MQ_BASE_SUITE:-bookworm}
packages=python3,python3-venv,ca-certificates
ca=/etc/ssl/certs/ca-certificates.crt

apt_mirror() {
    { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
      grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -m1 '/debian/\?$' || echo http://deb.debian.org/debian
}
mirror=${MQ_BASE_MIRROR:-$(apt_mirror)}

key=$( { echo "$suite $mirror $packages"; date +%Y-%m; cat "$0"; cat "$ca" 2>/dev/null || true; } \
       | sha256sum | cut -c1-12)
tag="mq-base:$suite-$key"
if [ "${MQ_BASE_REBUILD:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists (cached)" >&2
    echo "$tag"
    exit 0
fi

for tool in debootstrap docker tar; do
    command -v "$tool" >/dev/null || { echo "$0: $tool is not installed (apt-get install debootstrap docker.io)" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/mq-base.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
echo "building $tag: debootstrap $suite from $mirror (a few minutes)" >&2
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    echo "$0: debootstrap failed (full log above)" >&2
    exit 1
fi
# HTTPS from inside the image trusts what this host trusts (a TLS-inspecting proxy's CA too).
if [ -f "$ca" ]; then cp "$ca" "$work/rootfs/etc/ssl/certs/ca-certificates.crt"; fi
# What an image never needs: package caches and lists, documentation, translations.
rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/cache/apt/*.bin \
       "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* \
       "$work"/rootfs/usr/share/info/* "$work"/rootfs/usr/share/locale/* "$work"/rootfs/var/log/*.log
tar -C "$work/rootfs" --numeric-owner -c . \
    | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
        --message "debootstrap --variant=minbase $suite + $packages" - "$tag" >/dev/null
echo "$tag"
