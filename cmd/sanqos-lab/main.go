// Command sanqos-lab is sanqos' lab tools: the lab, its experiments, the
// simulator, tune and report (internal/labcli). The binary installed on a
// storage target is sanqos (cmd/sanqos).
//
// Imports (sanqos): internal/cli, internal/labcli.
package main

import (
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/labcli"
)

func main() { cli.Main(labcli.Root()) }
