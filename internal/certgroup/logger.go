package certgroup

import (
	"fmt"
	"strings"
)

// quietLogger drops Raft's own log lines: the group logs role changes
// itself, with the words of this project.
type quietLogger struct{}

func (quietLogger) Debug(...any)              {}
func (quietLogger) Debugf(string, ...any)     {}
func (quietLogger) Error(...any)              {}
func (quietLogger) Errorf(string, ...any)     {}
func (quietLogger) Info(...any)               {}
func (quietLogger) Infof(string, ...any)      {}
func (quietLogger) Warning(...any)            {}
func (quietLogger) Warningf(string, ...any)   {}
func (quietLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (quietLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Panicf(f string, v ...any) { panic(withHint(fmt.Sprintf(f, v...))) }

// lostLogHint explains Raft's panic when the leader knows this member had
// entries it no longer has: its data directory was wiped or replaced.
const lostLogHint = "; this member lost Raft log entries it had acknowledged (data directory wiped or replaced?): " +
	"a member restarted empty must be removed (`tashkent certifier members remove`) and added back under a new id (docs/OPERATIONS.md)"

func withHint(msg string) string {
	if strings.Contains(msg, "tocommit(") {
		return msg + lostLogHint
	}
	return msg
}
