package certifierpb

// NeedsStateTransfer starts the message of a Certify stream the certifier
// refuses with FAILED_PRECONDITION because the replica cannot catch up from
// its log: the log no longer holds the versions the replica needs (log
// retention), or the replica holds versions the certifier never made
// durable. The agent halts with a reason that starts with it, and the
// supervisor rebuilds such a replica from a peer (state transfer).
const NeedsStateTransfer = "needs state transfer"

// NeedsRewind starts the message of a Certify stream the certifier refuses
// with FAILED_PRECONDITION because the replica holds versions after the
// last one its history shares with the log (failed versions). The status
// carries a RewindRequired detail naming that version; a replica that
// cannot go back to it must be rebuilt from a peer.
const NeedsRewind = "needs rewind"
