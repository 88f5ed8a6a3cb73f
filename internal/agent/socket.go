package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// socketLocation is where the extension looks for the agent, as the
// database says: tashkent.agent_socket, relative to the data directory.
type socketLocation struct {
	dataDir string
	path    string // the extension's socket, resolved
}

// locateSocket asks the database where the extension's backends connect,
// retrying until it answers: the database may still be starting.
func (a *Agent) locateSocket(ctx context.Context) (socketLocation, error) {
	delay := 50 * time.Millisecond
	for {
		loc, err := a.askSocketLocation(ctx)
		if err == nil {
			return loc, nil
		}
		if ctx.Err() != nil {
			return loc, ctx.Err()
		}
		a.log.Warn("waiting for the replica's database", "err", err, "retry_in", delay)
		_ = ctxtime.Sleep(ctx, delay)
		delay = min(2*delay, reconnectDelayMax)
	}
}

func (a *Agent) askSocketLocation(ctx context.Context) (socketLocation, error) {
	conn, err := a.connect(ctx, controlApplicationName)
	if err != nil {
		return socketLocation{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var loc socketLocation
	var setting string
	err = conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('data_directory'),
		coalesce(pg_catalog.current_setting('tashkent.agent_socket', true), '')`).Scan(&loc.dataDir, &setting)
	if err != nil {
		return loc, fmt.Errorf("ask the database where its agent's socket is: %w", err)
	}
	if setting == "" {
		return loc, errors.New("the database has no tashkent.agent_socket: tashkent is not in its shared_preload_libraries")
	}
	loc.path = setting
	if !filepath.IsAbs(setting) {
		loc.path = filepath.Join(loc.dataDir, setting)
	}
	return loc, nil
}

// listen opens the socket backends connect to: Config.Socket, or where
// the extension looks. A stale socket file is removed; one another
// process still listens on is an error. Running as root, the socket is
// given to the data directory's owner (the user PostgreSQL runs as);
// nobody else may connect.
func (a *Agent) listen(ctx context.Context) error {
	loc, err := a.locateSocket(ctx)
	if err != nil {
		return err
	}
	path := a.cfg.Socket
	if path == "" {
		path = loc.path
	} else if abs, err := filepath.Abs(path); err == nil && abs != loc.path {
		a.log.Warn("the agent's socket is not where the extension looks for it (tashkent.agent_socket)",
			"socket", abs, "extension", loc.path)
	}
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	if err := restrictSocket(path, loc.dataDir); err != nil {
		ln.Close()
		return err
	}
	a.mu.Lock()
	a.ln, a.socket = ln, path
	a.mu.Unlock()
	a.log.Info("listening for the replica's backends", "socket", path)
	return nil
}

func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: socket %s: %w", path, err)
	}
	if st.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("agent: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("agent: another process listens on %s (another agent for this replica?)", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("agent: remove the stale socket %s: %w", path, err)
	}
	return nil
}

// restrictSocket makes the socket the data directory owner's alone.
func restrictSocket(path, dataDir string) error {
	if os.Geteuid() == 0 {
		owner, err := os.Stat(dataDir)
		if err != nil {
			owner, err = os.Stat(filepath.Dir(path))
		}
		if err != nil {
			return fmt.Errorf("agent: find the owner of the data directory %s: %w", dataDir, err)
		}
		st, ok := owner.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("agent: no owner for %s", dataDir)
		}
		if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("agent: give the socket to the data directory's owner: %w", err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("agent: socket mode: %w", err)
	}
	return nil
}
