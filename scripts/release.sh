#!/usr/bin/env bash
# make release: every artifact of a release, built on this machine with no
# registry (only what the Go module cache, Debian's setuptools and npm's
# own pack need, all offline), into DIST (default dist/):
#
#   sluice-<v>-linux-amd64, -linux-arm64, -darwin-arm64   static binaries (CGO_ENABLED=0)
#   sluice-<v>-<os>-<arch>.buildinfo                      `go version -m`: Go, module, every dependency
#   sluice-image-<v>-linux-<arch>.tar.gz                  the scratch image (docker load), tagged
#                                                         <repository>:<appVersion>, the chart's default
#   sluice-<chart version>.tgz                            the Helm chart (helm package)
#   sluice_client-<v>-py3-none-any.whl, sluice-client-<v>.tar.gz   clients/python
#   sluice-rl-sluice-<v>.tgz                              clients/node (npm pack)
#   SHA256SUMS                                            sha256sum -c SHA256SUMS checks them all
#
# VERSION (default: the chart's appVersion) is what `sluice version` prints
# and the image's tag; the chart is packaged with it as its appVersion, so
# the chart's default image and the image built here always agree. The
# image needs a Docker engine (FROM scratch: no registry). helm is HELM or
# the `tool` deploy/charttest's go.mod pins. docs/releasing.md says how the
# artifacts are published.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST=${DIST:-dist}
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
chart=deploy/helm/sluice

field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *\$/\1/p" "$chart/Chart.yaml"; }
app_version=$(field appVersion)
chart_version=$(field version)
repository=$(sed -n '/^image:/,/^[^ #]/ s/^  repository: *\([^ #]*\).*/\1/p' "$chart/values.yaml")
if [ -z "$app_version" ] || [ -z "$chart_version" ] || [ -z "$repository" ]; then
  echo "release: cannot read appVersion, version and image.repository from $chart" >&2
  exit 1
fi
VERSION=${VERSION:-$app_version}
IMAGE="$repository:$VERSION"

step() { printf '== %-44s' "$1"; t0=$(date +%s); }
done_() { echo " $(( $(date +%s) - t0 )) s"; }

rm -rf "$DIST"
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Binaries: static, reproducible paths (-trimpath), the version stamped in;
# the three build at once (each one's link overlaps the others' compiles).
ldflags="-s -w -X github.com/sluice-rl/sluice/server.Version=$VERSION"
step "binaries linux/amd64 linux/arm64 darwin/arm64"
pids=()
for target in linux/amd64 linux/arm64 darwin/arm64; do
  os=${target%/*} arch=${target#*/}
  out="$DIST/sluice-$VERSION-$os-$arch"
  ( CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/sluice &&
      $GO version -m "$out" | sed "s|^$DIST/||" >"$out.buildinfo" ) >"$work/build-$os-$arch.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
if [ $failed -ne 0 ]; then echo; cat "$work"/build-*.log >&2; exit 1; fi
done_

# The scratch image, from the Linux binary of the engine's architecture.
step "image $IMAGE"
arch=$(docker version --format '{{.Server.Arch}}' 2>/dev/null) ||
  { echo; echo "release: no Docker engine answers (docker version); the image needs one" >&2; exit 1; }
[ -f "$DIST/sluice-$VERSION-linux-$arch" ] ||
  { echo; echo "release: the engine runs linux/$arch, for which no binary is built" >&2; exit 1; }
ctx="$work/image"
mkdir -p "$ctx/bin" "$ctx/data"
cp "$DIST/sluice-$VERSION-linux-$arch" "$ctx/sluice"
ln -s /usr/local/bin/sluice "$ctx/bin/ratelimit"
DOCKER_BUILDKIT=0 docker build -q -f deploy/Dockerfile.scratch \
  --label "org.opencontainers.image.version=$VERSION" -t "$IMAGE" "$ctx" >"$work/docker.log" 2>&1 ||
  { echo; cat "$work/docker.log" >&2; exit 1; }
docker save "$IMAGE" | gzip -n >"$DIST/sluice-image-$VERSION-linux-$arch.tar.gz"
done_

# The chart, with the image's version as its appVersion (its default tag).
step "chart $chart_version (appVersion $VERSION)"
# helm: HELM, or the tool deploy/charttest's go.mod pins (`go tool`, built
# once from the module proxy into the Go cache, beside the Helm library the
# chart's tests use).
helm=${HELM:-$(cd deploy/charttest && $GO tool -n helm)}
"$helm" lint --strict "$chart" >"$work/lint" 2>&1 || { echo; cat "$work/lint" >&2; exit 1; }
"$helm" package "$chart" --app-version "$VERSION" --destination "$DIST" >/dev/null
done_

# The Python package, built from a copy (the build leaves build/ and
# *.egg-info beside the sources) through setuptools' PEP 517 hooks, which
# is what `python3 -m build --no-isolation` calls.
step "python wheel and sdist"
mkdir "$work/python"
tar -C clients/python --exclude=__pycache__ --exclude='*.egg-info' --exclude=build --exclude=dist \
  --exclude=.pytest_cache -cf - . | tar -C "$work/python" -xf -
for hook in build_sdist build_wheel; do
  (cd "$work/python" && "$PYTHON" -c 'import sys
from setuptools import build_meta
build_meta.'"$hook"'(sys.argv[1])' "$DIST") >"$work/python.log" 2>&1 ||
    { echo; cat "$work/python.log" >&2; exit 1; }
done
done_

step "npm tarball"
npm pack ./clients/node --pack-destination "$DIST" --loglevel=error >/dev/null
done_

(cd "$DIST" && sha256sum -- * >"$work/SHA256SUMS" && mv "$work/SHA256SUMS" SHA256SUMS)
echo "== $DIST:"
(cd "$DIST" && find . -type f -printf '%10s  %P\n' | sort -k2)
