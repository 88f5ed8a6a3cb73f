// Package configfile reads and writes the config files of tashkent's
// long-running processes (`tashkent agent`, `tashkent certifier`). A config
// file is TOML with one key per flag, spelled as the flag, at the top level:
//
//	name = "replica1"
//	certifier = "10.0.0.5:7400,10.0.0.6:7400,10.0.0.7:7400"
//	replica-index = 1
//	staleness = "100ms"
//	trust-ddl-roles = false
//
// A value has the TOML type of its flag: true or false for a switch, an
// integer for a count or a size (in the unit the flag's name says:
// segment-mib = 64), an array of strings for a repeatable flag, and a
// string for everything else, durations included ("100ms", "1s": the
// syntax the flag takes). So the reference tables of the flags are the
// reference of the files, and a file converts to a command line and back.
//
// Apply sets a command's flags from a file, except those the command line
// gave: the command line overrides the file, which overrides the defaults.
// An unknown key, a table, or a value of another type than its flag's is
// an error that names the file, the line and the key; Apply reports every
// such key at once. Effective and Encode print the result in the same
// format (--print-config); `tashkent up` writes its processes' files with
// Encode.
//
// The TOML is decoded twice: by go-toml's decoder, for the values and for
// the syntax errors, and by its parser, for the line of every key, which
// the decoded values do not carry.
package configfile
