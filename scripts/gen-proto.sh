#!/usr/bin/env bash
# Regenerates the committed gRPC code. Needs protoc (Debian: protobuf-compiler)
# and protoc-gen-go / protoc-gen-go-grpc on PATH (go install ...@latest).
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PATH:$(go env GOPATH)/bin"
protoc --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  api/certifierpb/certifier.proto api/certifierpb/group.proto
