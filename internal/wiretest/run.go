package wiretest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// untilTimeout bounds one until block: the statements scripts run are
// instant, so a longer wait means a missing message.
const untilTimeout = 5 * time.Second

// ApplicationName is the application_name of the scripts' connections.
const ApplicationName = "wiretest"

// Result is what one until block received, normalized.
type Result struct {
	Step int // index into Script.Steps
	Got  []string
	Err  error // the wanted messages did not all arrive
}

// Run runs the script on a new connection to addr (host:port) and returns
// the normalized answer of every until block. An I/O failure or a missing
// message ends the run with the Result that records it.
func Run(ctx context.Context, addr string, s *Script) ([]Result, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	fe := pgproto3.NewFrontend(conn, conn)
	if err := startup(conn, fe); err != nil {
		return nil, err
	}
	var results []Result
	for i, step := range s.Steps {
		if step.Until == nil {
			for _, m := range step.Send {
				fe.Send(m)
			}
			if err := fe.Flush(); err != nil {
				return results, fmt.Errorf("line %d: send: %w", step.Line, err)
			}
			continue
		}
		r := Result{Step: i}
		r.Got, r.Err = receiveUntil(conn, fe, step.Until)
		results = append(results, r)
		if r.Err != nil {
			break
		}
	}
	fe.Send(&pgproto3.Terminate{})
	_ = fe.Flush()
	return results, nil
}

func startup(conn net.Conn, fe *pgproto3.Frontend) error {
	_ = conn.SetDeadline(time.Now().Add(untilTimeout))
	defer conn.SetDeadline(time.Time{})
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "postgres", "application_name": ApplicationName}})
	if err := fe.Flush(); err != nil {
		return err
	}
	for {
		msg, err := fe.Receive()
		if err != nil {
			return fmt.Errorf("startup: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			return nil
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("startup: %s %s", m.Code, m.Message)
		}
	}
}

// receiveUntil reads messages until the types in until have arrived in order.
func receiveUntil(conn net.Conn, fe *pgproto3.Frontend, until []string) ([]string, error) {
	_ = conn.SetReadDeadline(time.Now().Add(untilTimeout))
	defer conn.SetReadDeadline(time.Time{})
	var got []string
	for len(until) > 0 {
		msg, err := fe.Receive()
		if err != nil {
			return got, fmt.Errorf("waiting for %s: %w", strings.Join(until, ", "), err)
		}
		typ, line, err := Normalize(msg)
		if err != nil {
			return got, err
		}
		got = append(got, line)
		if typ == until[0] {
			until = until[1:]
		}
	}
	return got, nil
}

// Normalize renders a backend message as one line of JSON with sorted keys
// and applies the normalizations (package documentation).
func Normalize(msg pgproto3.BackendMessage) (typ, line string, err error) {
	raw, err := json.Marshal(msg)
	if err != nil {
		return "", "", err
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", "", err
	}
	typ, _ = fields["Type"].(string)
	switch m := msg.(type) {
	case *pgproto3.ErrorResponse, *pgproto3.NoticeResponse:
		for _, k := range []string{"File", "Line", "Routine"} {
			delete(fields, k)
		}
		for k, v := range fields { // empty optional fields say nothing
			if v == "" || v == float64(0) {
				delete(fields, k)
			}
		}
	case *pgproto3.RowDescription:
		// Table OIDs are per database: say only whether a column comes
		// from a table.
		for _, f := range fields["Fields"].([]any) {
			if col := f.(map[string]any); col["TableOID"] != float64(0) {
				col["TableOID"] = "table"
			}
		}
	case *pgproto3.CopyData:
		delete(fields, "Data")
		fields["Text"] = string(m.Data)
	}
	out, err := json.Marshal(fields)
	return typ, string(out), err
}
