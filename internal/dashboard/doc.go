// Package dashboard is the cluster's web page and the JSON it is drawn
// from. Every agent and every certifier (single, or each member of a
// group) serves the same page on its HTTP listener, beside /metrics and
// /healthz:
//
//	GET /             the page (index.html, dashboard.js, dashboard.css, embedded: no
//	                  external asset, works offline)
//	GET /api/status   this process alone: an agent's ReplicaStatus, a certifier's MemberStatus
//	GET /api/cluster  the whole cluster (Cluster), gathered by this process when asked
//
// # How a process sees the whole cluster
//
// No process holds the cluster's state, so /api/cluster asks the others,
// each question bounded by peerTimeout, and reports what did not answer
// instead of failing:
//
//  1. The certifier: the Status RPC of every certifier address this
//     process knows (an agent: its --certifier list; a member: itself, in
//     process, and the members its group lists), then of any member a
//     reply names that was not asked yet. The leader's (or the single
//     certifier's) reply gives the cluster's versions and rates.
//  2. The replicas: every agent tells the certifier, when it opens its
//     session, where its HTTP listener is (OpenSession.status_addr); the
//     certifier lists every replica that opened a session since it started,
//     connected or not (StatusReply.replicas). Each listed replica's own
//     /api/status is fetched; an agent answers for itself in process.
//  3. Alerts are derived from the result (alerts.go).
//
// So a replica whose agent is down shows as unreachable (the certifier
// still lists it, as disconnected), and a certifier that does not answer
// shows as such while the replicas that answer are still shown. What is
// not seen: a replica that never opened a session with the current
// certifier process (or, in a group, with a member that is up), such as
// one that died before a new leader was elected; and, until the
// certifier restarts, a replica that was removed for good stays listed
// as unreachable.
//
// The page polls /api/cluster every second and keeps the last minutes of
// samples for its charts; rates (commits per second, abort rate) are
// computed by the page from the counters of consecutive samples. One
// gathering serves every request within cacheFor, so that many open pages
// cost the cluster no more than one.
package dashboard
