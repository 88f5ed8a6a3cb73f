package sim

// startNemesis injects node faults until the heal: every
// 1..NemesisTicksMax ticks it crashes a replica (its agent and database,
// only its database, or only its agent), crashes the certifier,
// re-creates the certifier from an empty data directory, or partitions a
// replica from the certifier (both ways or one way), and undoes it
// 1..DownTicksMax ticks later.
func startNemesis(w *world) {
	w.after(w.between(1, w.cfg.NemesisTicksMax), "nemesis", func() {
		if w.healing {
			return
		}
		nemesisAct(w)
		startNemesis(w)
	})
}

func nemesisAct(w *world) {
	c := w.cfg
	total := c.ReplicaCrashWeight + c.CertifierCrashWeight + c.PartitionWeight + c.CertifierRecreateWeight
	if total == 0 {
		return
	}
	pick := w.rng.IntN(total)
	down := w.between(1, c.DownTicksMax)
	switch {
	case pick < c.ReplicaCrashWeight:
		crashReplica(w, w.replicas[w.rng.IntN(len(w.replicas))], down)
	case pick < c.ReplicaCrashWeight+c.CertifierCrashWeight:
		crashCertifier(w, down)
	case pick < c.ReplicaCrashWeight+c.CertifierCrashWeight+c.PartitionWeight:
		partition(w, w.rng.IntN(len(w.replicas)), down)
	default:
		recreateCertifier(w, down)
	}
}

func crashReplica(w *world, r *replica, down int64) {
	if w.rng.IntN(100) < w.cfg.DatabaseOnlyCrashRate {
		r.crashDatabaseOnly(down)
		return
	}
	if !r.up {
		return
	}
	r.crash(w.rng.IntN(100) < w.cfg.AgentOnlyCrashRate)
	w.after(down, "replica-restart", func() {
		if !r.up {
			r.restart()
		}
	})
}

func crashCertifier(w *world, down int64) {
	if !w.cert.up {
		return
	}
	w.cert.crash()
	w.after(down, "certifier-restart", func() {
		if !w.cert.up {
			w.cert.restart()
		}
	})
}

// recreateCertifier replaces the certifier's data directory with an
// empty one. A running certifier crashes and restarts on it; a crashed one
// restarts on it when its restart is due.
func recreateCertifier(w *world, down int64) {
	wasUp := w.cert.up
	w.cert.recreate()
	if wasUp {
		w.after(down, "certifier-restart", func() {
			if !w.cert.up {
				w.cert.restart()
			}
		})
	}
}

func partition(w *world, replica int, down int64) {
	if w.net.partitioned[replica] != 0 {
		return
	}
	c := cutBoth
	if w.rng.IntN(100) < w.cfg.OneWayPartitionRate {
		c = []cut{cutToCertifier, cutFromCertifier}[w.rng.IntN(2)]
	}
	w.net.partition(replica, c)
	w.after(down, "partition-heal", func() { w.net.heal(replica) })
}
