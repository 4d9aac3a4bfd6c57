# Sourced by the GPU scripts: when the machine lacks tokamak's build dependencies (the GPU image has
# CUDA but not these -dev packages, and no apt), unpack the carried .debs of scripts/gpu_debs.sh
# into /tmp/deps and point pkg-config, CMake and the loader at them. Sets TK_CMAKE_ARGS.
TK_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90 -DCUDNN_INCLUDE_DIR=/usr/include/x86_64-linux-gnu"
if ! pkg-config --exists libpcre2-8 tomlplusplus libxxhash snappy libbrotlidec liblz4 2>/dev/null && [ -d .shared/debs ]; then
  D=/tmp/deps
  L=$D/usr/lib/x86_64-linux-gnu
  mkdir -p $D
  for f in .shared/debs/*.deb; do dpkg -x "$f" $D; done
  ln -sf $D/lib/x86_64-linux-gnu/libz.so.1.2.13 $L/libz.so
  export PKG_CONFIG_PATH=$L/pkgconfig:$L/openblas-pthread/pkgconfig:$D/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export LD_LIBRARY_PATH=$L:$L/openblas-pthread:$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  TK_CMAKE_ARGS="$TK_CMAKE_ARGS -DCMAKE_PREFIX_PATH=$D/usr;$L/openblas-pthread -DCMAKE_POLICY_VERSION_MINIMUM=3.5"
  TK_CMAKE_ARGS="$TK_CMAKE_ARGS -DCMAKE_CXX_FLAGS=-isystem$D/usr/include"
fi
# Open MPI from the carried .debs when the image has no mpi.h: FindMPI is given the header and library directly
# (its compiler wrapper would point at the system's paths).
if [ ! -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] && [ -d .shared/debs ]; then
  D=/tmp/deps
  L=$D/usr/lib/x86_64-linux-gnu
  mkdir -p $D
  for f in .shared/debs/*openmpi*.deb; do dpkg -x "$f" $D; done
  TK_CMAKE_ARGS="$TK_CMAKE_ARGS -DMPI_CXX_HEADER_DIR=$L/openmpi/include -DMPI_CXX_LIB_NAMES=mpi"
  TK_CMAKE_ARGS="$TK_CMAKE_ARGS -DMPI_mpi_LIBRARY=$L/libmpi.so.40 -DMPIEXEC_EXECUTABLE=$D/usr/bin/mpirun.openmpi"
  export LD_LIBRARY_PATH=$L:$L/openmpi/lib:${LD_LIBRARY_PATH:-}
  export OPAL_PREFIX=$D/usr
fi
# OpenBLAS misdetects the GPU host's CPU (Prescott kernels, 7x slower): name the core type.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
# The peer's compiled graphs and kernels (bench/torch_peer.py) kept in the repository's ignored cache, so that a later
# call on the same machine need not compile them again (the timed steps are the same either way).
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/.cache/torchinductor}
