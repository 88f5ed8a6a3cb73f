package cli

import (
	"log/slog"

	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// certifierTLS turns the --certifier-tls-* flags of a certifier into its
// server options and the dial options its group member uses towards its
// peers (none and plaintext without the flags).
func certifierTLS(f grpctls.Files) ([]grpc.ServerOption, []grpc.DialOption, error) {
	server, err := f.ServerOptions(slog.Default())
	if err != nil {
		return nil, nil, err
	}
	dial, err := f.DialOptions()
	if err != nil {
		return nil, nil, err
	}
	return server, dial, nil
}

// certifierDial is the dial option of a command that talks to a
// certifier (agent, certifier members, certifier-bench).
func certifierDial(f grpctls.Files) (grpc.DialOption, error) { return f.DialOption() }
