#!/bin/bash
# `make image`: the Containerfile built where no image can be pulled. The base is made of Debian
# packages (debian-base.sh, kept in build/image/ and imported once per version of that script),
# and the Python packages come from build/wheelhouse: the wheels of constraints.txt, downloaded
# by the host's pip, so the build itself needs no way out. Elsewhere, `podman build -t ssekd .`
# (or docker build) builds the same recipe FROM python:3.11-slim with packages from PyPI.
#
#   PODMAN='podman ...' PIP=.venv/bin/pip deploy/container/build-image.sh IMAGE
#
# Run from the project's root. Says what it does as it goes, and the seconds each part took. The
# first build makes the Debian base (debootstrap: a minute or more, see docs/deploying.md); the
# base is kept as build/image/debian-base-<key>.tar and as podman's image
# localhost/ssekd-debian-base:<key>, and reused until debian-base.sh changes.
set -eu
image=${1:-localhost/ssekd:latest}
podman=${PODMAN:-podman}
pip=${PIP:-pip}
mkdir -p build/image build/wheelhouse
started=$(date +%s)

# The base: one image per version of debian-base.sh.
key=$(cksum < deploy/container/debian-base.sh | cut -d' ' -f1)
base=localhost/ssekd-debian-base:$key
if $podman image exists "$base"; then
  echo "image: the Debian base $base is there (made once, reused)"
else
  tar=build/image/debian-base-$key.tar
  if [ ! -f "$tar" ]; then
    echo "image: making the Debian base with debootstrap into $tar (once: a minute or more, several on a busy machine)"
    deploy/container/debian-base.sh "$tar"
  fi
  echo "image: importing $tar as $base"
  $podman import --quiet "$tar" "$base" > /dev/null
fi
based=$(date +%s)

# The wheels: the runtime dependencies of pyproject.toml, and the wheel build's setuptools and
# wheel, at the versions of constraints.txt, for the Python of the base (Debian 12: 3.11).
# Kept while constraints.txt is unchanged.
stamp=build/wheelhouse/.constraints-$(cat constraints.txt pyproject.toml | cksum | cut -d' ' -f1)
if [ -f "$stamp" ]; then
  echo "image: the wheels of constraints.txt are in build/wheelhouse (kept)"
else
  echo "image: downloading the wheels of constraints.txt into build/wheelhouse"
  rm -f build/wheelhouse/*.whl build/wheelhouse/.constraints-*
  python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
    > build/wheelhouse/requirements.txt
  $pip download --quiet --dest build/wheelhouse --only-binary=:all: --python-version 3.11 \
    -c constraints.txt -r build/wheelhouse/requirements.txt setuptools wheel Cython
  touch "$stamp"
fi
# ssekd's own wheel, built here every time: this machine's C compiler makes the hot path's
# compiled twin (the Debian base has no compiler). Debian 12 here and in the base: the same
# Python 3.11 and C library. Built in build/ssekd-wheel, apart from the wheels above, so a
# change of ssekd's code leaves the image's layer of dependencies as it was.
echo "image: building ssekd's wheel into build/ssekd-wheel"
rm -rf build/ssekd-wheel && mkdir -p build/ssekd-wheel
PIP_CONSTRAINT=constraints.txt $pip wheel --quiet --no-deps --wheel-dir build/ssekd-wheel .
wheeled=$(date +%s)

# The build's containers get ulimits stated here (podman_ulimits), not podman's defaults, which
# may be above what this machine lets a process raise its limits to.
. deploy/container/ulimits.sh
echo "image: building $image from the Containerfile"
$podman build --quiet --pull=never --network host $(podman_ulimits) \
  --build-arg BASE="$base" --build-arg WHEELS=build/wheelhouse --build-arg PIP_NO_INDEX=1 \
  --build-arg SSEKD_WHEEL=build/ssekd-wheel \
  --tag "$image" --file Containerfile . > /dev/null
built=$(date +%s)
# Nothing is pruned here: the storage may hold other images than ssekd's (the tests prune
# their own storage, tests/support/image.py).
echo "image $image: base $((based - started)) s, wheels $((wheeled - based)) s, build $((built - wheeled)) s"
