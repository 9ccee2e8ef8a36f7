#!/bin/sh
# A base image for the Containerfile made only of Debian packages, for machines that cannot pull
# python:3.11-slim from a registry (`make image` uses it): Debian 12's minimal system
# (debootstrap --variant=minbase) with python3 and its venv module, less what an image never
# reads (apt's package lists and downloads, documentation, manual pages, translations), as a
# tar file for `podman import`. Needs root (debootstrap) and a Debian mirror.
#
#   deploy/container/debian-base.sh OUT.tar
#
# DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -eu
out=$1
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d "${TMPDIR:-/tmp}/ssekd-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$root" "$mirror" > "$root.log" 2>&1 || { cat "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/usr/share/info/* \
  "$root"/var/log/*.log "$root"/var/log/apt/*
tar --numeric-owner -C "$root" -cf "$out.part" .
mv "$out.part" "$out"
