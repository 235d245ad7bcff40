#!/usr/bin/env bash
# Benchmarks on a lent GPU machine (the device tool): no network there, so the
# two pure-Python dependencies JAX's image lacks travel as wheels in .whl/
# (carry it), and the tree runs from PYTHONPATH, not `make bench`'s install.
#
#   tools/device_bench.sh SECONDS MODULE...    # results and log under $OUT
#
# Each module gets what is left of SECONDS (a module cut off writes nothing);
# matrix products at float32 precision (the GPU's TF32 default changes the
# rounding that the benchmarks' agreement checks compare).
set -u
deadline=$(($(date +%s) + $1))
shift
out=${OUT:-/tmp/device_bench}
mkdir -p "$out" /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KT_BENCH_RESULTS=$out
export JAX_DEFAULT_MATMUL_PRECISION=highest KT_BENCH_MAX_TRIPS=${KT_BENCH_MAX_TRIPS:-100000}
log=$out/log
{
    nvidia-smi -L
    python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
    python3 -c "
import jax, jax.numpy as jnp
from jax import lax
j = jax.make_jaxpr(lambda c, xs: lax.scan(lambda c, x: (c * x, c), c, xs))(1.0, jnp.ones(3))
print('scan params:', sorted(j.eqns[0].params))"
} >"$log" 2>&1
for module in "$@"; do
    left=$((deadline - $(date +%s)))
    if [ "$left" -le 10 ]; then
        echo "== $module: not run (time is up)" >>"$log"
        continue
    fi
    echo "== $module (up to ${left}s)" >>"$log"
    start=$(date +%s)
    timeout "$left" python3 -m bench.run "$module" >>"$log" 2>&1
    echo "== $module: exit $?, $(($(date +%s) - start))s" >>"$log"
done
