#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages tokamak builds against, into .shared/debs,
# for a GPU machine whose image has CUDA but not these -dev packages and cannot reach apt itself.
# tests/gpu/env.sh unpacks them there. .shared/ is git-ignored; carry it with the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .shared/debs && cd .shared/debs
apt-get download libcli11-dev libfmt-dev libfmt9 libgtest-dev libopenblas-dev libopenblas-pthread-dev \
  libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libpcre2-dev libpcre2-8-0 libpcre2-16-0 \
  libpcre2-32-0 libpcre2-posix3 libzstd-dev libzstd1 nlohmann-json3-dev zlib1g-dev zlib1g libicu-dev libicu72 \
  libtomlplusplus-dev libtomlplusplus3 libxxhash-dev libxxhash0 libsnappy-dev libsnappy1v5 libbrotli-dev libbrotli1 \
  liblz4-dev liblz4-1
# Open MPI's headers and libraries (tk_dist needs them to build), for an image without them.
apt-get download libopenmpi-dev libopenmpi3 openmpi-common openmpi-bin libhwloc15 libevent-core-2.1-7 \
  libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libmunge2 libpsm2-2 libpsm-infinipath1 libibverbs1 librdmacm1 \
  libnl-3-200 libnl-route-3-200 libnuma1 libltdl7 libxnvctrl0 libpciaccess0
