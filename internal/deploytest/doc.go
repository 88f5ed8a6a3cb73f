// Package deploytest runs the cluster of docs/DEPLOYMENT.md: three hosts,
// each with PostgreSQL 15 and the tashkent extension, an agent and a
// member of the certifier group, TLS on every network channel, a firewall.
// Each host is a network namespace of its own with its own address on a
// bridge, and every process starts from a config file made from the
// guide's example files in deploy/ (deploy/config, deploy/make-certs.sh)
// with the addresses and directories of the test substituted, so the guide
// cannot drift from what is run. The package has only its test; the
// helpers it uses to make hosts are in internal/netns.
package deploytest
