package certification

// referenceModel is the paper's certification, written as plainly as
// possible: keep every committed writeset and scan all of those committed
// after the request's start version (Tashkent §6.1, step 1). It shares no code
// with State.
type referenceModel struct {
	window  uint64
	log     []modelEntry // log[i] has version i+1
	version uint64
}

type modelEntry struct {
	txn  TxnID
	keys []Key
}

func overlaps(a, b Key) bool {
	if a.Table == 0 || b.Table == 0 {
		return true
	}
	if a.Table != b.Table {
		return false
	}
	return a.Row == 0 || b.Row == 0 || a.Row == b.Row
}

func (m *referenceModel) lowWaterMark() uint64 {
	if m.version > m.window {
		return m.version - m.window
	}
	return 0
}

func (m *referenceModel) certify(req Request) Outcome {
	lwm := m.lowWaterMark()
	for v := m.version; v > lwm; v-- {
		if m.log[v-1].txn == req.Txn {
			return Outcome{Decision: Commit, CommitVersion: v, Duplicate: true}
		}
	}
	if len(req.Keys) == 0 || req.StartVersion > m.version {
		return Outcome{Decision: Abort, Reason: ReasonInvalid}
	}
	if req.StartVersion < lwm {
		return Outcome{Decision: Abort, Reason: ReasonTooOld}
	}
	for v := req.StartVersion + 1; v <= m.version; v++ {
		for _, committedKey := range m.log[v-1].keys {
			for _, k := range req.Keys {
				if overlaps(k, committedKey) {
					return Outcome{Decision: Abort, Reason: ReasonConflict}
				}
			}
		}
	}
	m.log = append(m.log, modelEntry{txn: req.Txn, keys: req.Keys})
	m.version++
	return Outcome{Decision: Commit, CommitVersion: m.version}
}

// conflictsWith reports whether the committed version v wrote a key that
// overlaps k: how the tests check the conflict State reports.
func (m *referenceModel) conflictsWith(v uint64, k Key) bool {
	for _, committedKey := range m.log[v-1].keys {
		if overlaps(k, committedKey) {
			return true
		}
	}
	return false
}
