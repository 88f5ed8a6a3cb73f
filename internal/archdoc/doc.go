// Package archdoc holds the test that keeps the package table of
// docs/ARCHITECTURE.md equal to the module's packages: a package added,
// moved or removed without its row fails it. It has no code of its own.
package archdoc
