// Command etcd is the etcd server built from the Go module proxy for the
// local test control plane (see ../README.md). It only calls etcdmain.Main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
