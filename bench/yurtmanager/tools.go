//go:build tools

// Package tools pins what bench/yurtmanager/build.py builds: OpenYurt's yurt-manager from the
// openyurt module of go.mod (the same pin as bench/yurthub's YurtHub).
package tools

import _ "github.com/openyurtio/openyurt/cmd/yurt-manager"
