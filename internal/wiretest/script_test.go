package wiretest

import (
	"strings"
	"testing"
)

// A replica section needs a "# differs:" line saying why, and a "#
// differs:" line needs a replica section: a difference is never silent,
// and a reason never outlives its difference.
func TestDifferencesAreDeclaredWithTheirReason(t *testing.T) {
	const block = "send\nQuery {\"String\": \"SELECT 1\"}\n\nuntil\nReadyForQuery\n----\n{\"Type\":\"ReadyForQuery\"}\n"
	for name, tc := range map[string]struct {
		text    string
		wantErr string
	}{
		"same":                 {block, ""},
		"declared":             {"# differs: because\n" + block + "---- replica\n{\"Type\":\"ErrorResponse\"}\n", ""},
		"replica without why":  {block + "---- replica\n{\"Type\":\"ErrorResponse\"}\n", "without a \"# differs:\""},
		"why without replica":  {"# differs: because\n" + block, "no until block has a replica section"},
		"replica before ----":  {"send\nSync\n\nuntil\nReadyForQuery\n---- replica\n", "belongs after"},
		"two replica sections": {"# differs: x\n" + block + "---- replica\n---- replica\n", "belongs after"},
	} {
		s, err := Parse(name, strings.NewReader(tc.text))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.wantErr)
		case name == "declared" && (s.Differs != "because" || s.Steps[1].ReplicaWant == nil):
			t.Errorf("declared: differs %q, replica section %v", s.Differs, s.Steps[1].ReplicaWant)
		}
	}
}
