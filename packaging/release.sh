#!/bin/sh
# Builds the release binary: packaging/release.sh VERSION [OUT]
#
#   -s -w     no symbol table and no DWARF: 35 MB instead of 49 MB (panics
#             still name their files and lines: that table stays)
#   -X        the version --version prints, with the checkout's revision
#   CGO off   one static binary (modernc.org/sqlite is pure Go)
#
# Without -trimpath, so that a build reuses the compile cache of the tests
# (a -trimpath build recompiles the standard library and every dependency:
# minutes on a small machine) and TestVersionFromLdflagsAndVCS builds with
# this very script; -trimpath only removes the build directory's path from
# the binary. For a build that is the same from any directory, run it with
# GOFLAGS=-trimpath (go build reads GOFLAGS).
set -eu
version=${1:?usage: packaging/release.sh VERSION [OUT]}
out=${2:-edgerelay}
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -buildvcs=true -ldflags "-s -w -X main.version=$version" -o "$out" .
