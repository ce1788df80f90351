package cli

import (
	"fmt"

	"github.com/spf13/pflag"
)

// RenamedFlag keeps a renamed flag's old name working, so that scripts do
// not break: old becomes a hidden alias of the flag now called name
// (setting either sets the same value), pflag warns on stderr whenever it
// is used, and name's help says so. docs/cli.md lists every rename.
func RenamedFlag(fs *pflag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("RenamedFlag: no flag --" + name)
	}
	fs.AddFlag(&pflag.Flag{Name: old, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal})
	if err := fs.MarkDeprecated(old, "use --"+name); err != nil {
		panic(err)
	}
	f.Usage += fmt.Sprintf(" (formerly --%s, still accepted)", old)
}
