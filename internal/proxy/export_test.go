package proxy

import "net"

// SetCommitSentHook makes p call f with a session's connection to its
// database each time a certified transaction's local commit has been sent,
// before the answer is read.
func SetCommitSentHook(p *Proxy, f func(backend net.Conn)) { p.commitSent.Store(&f) }
