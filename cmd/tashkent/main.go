// Command tashkent is the one binary of the project: certifier, agent and the
// local-cluster and benchmark tools are its subcommands (see internal/cli).
package main

import (
	"os"

	"github.com/tashkent-db/tashkent/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
