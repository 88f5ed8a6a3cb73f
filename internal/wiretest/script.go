package wiretest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Script is one parsed testdata file.
type Script struct {
	Name  string
	Steps []Step
	// Differs is the text of the script's "# differs: ..." lines: why a
	// replica must answer differently from PostgreSQL. A script has it
	// exactly when one of its until blocks has a replica section.
	Differs string
}

// Step is a send or an until block.
type Step struct {
	Line  int                        // where the block starts, for messages
	Send  []pgproto3.FrontendMessage // a send block
	Until []string                   // an until block: the backend message types to wait for
	Want  []string                   // an until block: the expected normalized messages
	// ReplicaWant, if not nil, is what a replica answers instead of Want
	// (the lines after "---- replica").
	ReplicaWant []string
}

// replicaSection starts an until block's replica section.
const replicaSection = "---- replica"

// Parse reads a script (see the package documentation for the format).
func Parse(name string, r io.Reader) (*Script, error) {
	s := &Script{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *Step
	inWant, inReplica := false, false
	lineNo := 0
	replicaSections := 0
	flush := func() {
		if cur != nil {
			s.Steps = append(s.Steps, *cur)
		}
		cur, inWant, inReplica = nil, false, false
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# differs:"):
			s.Differs = strings.TrimSpace(s.Differs + " " + strings.TrimSpace(strings.TrimPrefix(line, "# differs:")))
			continue
		case strings.HasPrefix(line, "#"):
			continue
		case strings.TrimSpace(line) == "":
			flush()
			continue
		case cur == nil:
			switch strings.TrimSpace(line) {
			case "send":
				cur = &Step{Line: lineNo}
			case "until":
				cur = &Step{Line: lineNo, Until: []string{}}
			default:
				return nil, fmt.Errorf("%s:%d: want send or until, got %q", name, lineNo, line)
			}
		case line == "----":
			if cur.Until == nil {
				return nil, fmt.Errorf("%s:%d: ---- after send (only until blocks have expected output)", name, lineNo)
			}
			inWant = true
		case line == replicaSection:
			if !inWant || inReplica {
				return nil, fmt.Errorf("%s:%d: %s belongs after an until block's ----", name, lineNo, replicaSection)
			}
			inReplica = true
			cur.ReplicaWant = []string{}
			replicaSections++
		case inReplica:
			cur.ReplicaWant = append(cur.ReplicaWant, line)
		case inWant:
			cur.Want = append(cur.Want, line)
		case cur.Until != nil:
			cur.Until = append(cur.Until, strings.TrimSpace(line))
		default:
			msg, err := parseFrontend(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, lineNo, err)
			}
			cur.Send = append(cur.Send, msg)
		}
	}
	flush()
	switch {
	case replicaSections > 0 && s.Differs == "":
		return nil, fmt.Errorf("%s: a replica section without a \"# differs:\" line saying why", name)
	case replicaSections == 0 && s.Differs != "":
		return nil, fmt.Errorf("%s: \"# differs:\" but no until block has a replica section", name)
	}
	return s, sc.Err()
}

// parseFrontend reads "Type {json}" into a frontend message.
func parseFrontend(line string) (pgproto3.FrontendMessage, error) {
	typ, body, _ := strings.Cut(strings.TrimSpace(line), " ")
	if body == "" {
		body = "{}"
	}
	if typ == "CopyData" {
		var v struct{ Text string }
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return nil, fmt.Errorf("CopyData: %w", err)
		}
		return &pgproto3.CopyData{Data: []byte(v.Text)}, nil
	}
	var msg pgproto3.FrontendMessage
	switch typ {
	case "Query":
		msg = &pgproto3.Query{}
	case "Parse":
		msg = &pgproto3.Parse{}
	case "Bind":
		msg = &pgproto3.Bind{}
	case "Describe":
		msg = &pgproto3.Describe{}
	case "Execute":
		msg = &pgproto3.Execute{}
	case "Close":
		msg = &pgproto3.Close{}
	case "Sync":
		msg = &pgproto3.Sync{}
	case "Flush":
		msg = &pgproto3.Flush{}
	case "CopyDone":
		msg = &pgproto3.CopyDone{}
	case "CopyFail":
		msg = &pgproto3.CopyFail{}
	case "FunctionCall":
		msg = &pgproto3.FunctionCall{}
	default:
		return nil, fmt.Errorf("unknown frontend message type %q", typ)
	}
	if err := json.Unmarshal([]byte(body), msg); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	return msg, nil
}
