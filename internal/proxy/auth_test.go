package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadUserList(t *testing.T) {
	const v = "SCRAM-SHA-256$4096:c2FsdHNhbHQ=$c3RvcmVk:c2VydmVy"
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "userlist.txt")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	users, err := LoadUserList(write("# users\n\n\"alice\" \"" + v + "\"\n  \"bo\"\"b\"   \"" + v + "\"  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users["alice"] != v || users[`bo"b`] != v {
		t.Fatalf("users %v", users)
	}
	for _, bad := range []string{
		`alice "` + v + `"`,       // unquoted
		`"alice" "` + v,           // unterminated
		`"alice"`,                 // no verifier
		`"alice" "md5abcdef0123"`, // not SCRAM
	} {
		if _, err := LoadUserList(write(bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Fatalf("%q: %v, want an error naming line 1", bad, err)
		}
	}
	if _, err := LoadUserList(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}
