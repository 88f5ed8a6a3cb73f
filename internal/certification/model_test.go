package certification

// referenceModel is the paper's certification, written as plainly as
// possible: keep every committed writeset and scan all of those committed
// after the request's start version (Tashkent §6.1, step 1). It shares no code
// with State. Foreign-key references are shared keys: two keys conflict when
// they overlap, unless both are references, or one is a reference and the
// other a keeping write (an update that kept the referenced row). A keyless
// insert conflicts only with a write of its whole table or of the schema.
// A span (Request.Versions) is one log entry per version, each naming the
// transaction and the span's first version, with every key on each entry:
// the model does not know that no snapshot falls inside a span.
type referenceModel struct {
	window  uint64
	log     []modelEntry // log[i] has version i+1
	version uint64
}

type modelEntry struct {
	txn   TxnID
	keys  []Key
	first uint64 // the first version of the transaction's span
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

// conflicts is the whole rule: overlapping keys conflict unless both are
// references or one is a reference and the other a keeping write; a
// keyless insert conflicts with whole-table and schema writes only; a
// reference and a keeping write must name one row, a keyless insert one
// table.
func conflicts(a, b Key) bool {
	if a.Kind == KeylessInsert || b.Kind == KeylessInsert {
		ins, other := a, b
		if b.Kind == KeylessInsert {
			ins, other = b, a
		}
		return other.Kind == Write && other.Row == 0 && (other.Table == 0 || other.Table == ins.Table)
	}
	if a.Kind == Reference && (b.Kind == Reference || b.Kind == KeepingWrite) ||
		b.Kind == Reference && a.Kind == KeepingWrite {
		return false
	}
	return overlaps(a, b)
}

func validKey(k Key) bool {
	return k.Kind == Write || ((k.Kind == Reference || k.Kind == KeepingWrite) && k.Table != 0 && k.Row != 0) ||
		(k.Kind == KeylessInsert && k.Table != 0 && k.Row == 0)
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
			return Outcome{Decision: Commit, CommitVersion: v, FirstVersion: m.log[v-1].first, Duplicate: true}
		}
	}
	if len(req.Keys) == 0 || req.StartVersion > m.version || req.Versions < 0 {
		return Outcome{Decision: Abort, Reason: ReasonInvalid}
	}
	for _, k := range req.Keys {
		if !validKey(k) {
			return Outcome{Decision: Abort, Reason: ReasonInvalid}
		}
	}
	if req.StartVersion < lwm {
		return Outcome{Decision: Abort, Reason: ReasonTooOld}
	}
	for v := req.StartVersion + 1; v <= m.version; v++ {
		for _, committedKey := range m.log[v-1].keys {
			for _, k := range req.Keys {
				if conflicts(k, committedKey) {
					// Which of the two conflict reasons State names depends
					// on the key it checks first: the tests compare only
					// that it is a conflict, then check State's (version,
					// key, reason) with conflictKinds.
					return Outcome{Decision: Abort, Reason: ReasonConflict}
				}
			}
		}
	}
	first := m.version + 1
	for range max(req.Versions, 1) {
		m.log = append(m.log, modelEntry{txn: req.Txn, keys: req.Keys, first: first})
		m.version++
	}
	return Outcome{Decision: Commit, CommitVersion: m.version, FirstVersion: first}
}

// conflictKinds reports whether the committed version v has a key that
// conflicts with k as a write-write conflict (both writes) and as a
// reference conflict (one of them a reference): how the tests check the
// conflict and the reason State reports.
func (m *referenceModel) conflictKinds(v uint64, k Key) (writeWrite, reference bool) {
	for _, committedKey := range m.log[v-1].keys {
		if !conflicts(k, committedKey) {
			continue
		}
		if k.Kind != Reference && committedKey.Kind != Reference {
			writeWrite = true
		} else {
			reference = true
		}
	}
	return writeWrite, reference
}

// isConflict reports whether r is one of the two conflict reasons.
func isConflict(r Reason) bool { return r == ReasonConflict || r == ReasonReferenceConflict }
