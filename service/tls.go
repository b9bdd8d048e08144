package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// tlsConfig returns the server's TLS configuration, nil without TLS. The
// certificate and key are read again when their files change (checked at
// most once a second, on a handshake), as OPA and Cerbos do: a rotated
// certificate is served without a restart, and a broken pair keeps the
// previous one serving.
func (c *Config) tlsConfig(log *slog.Logger) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	kp := &keyPair{certFile: c.TLSCert, keyFile: c.TLSKey, log: log}
	if err := kp.load(); err != nil {
		return nil, fmt.Errorf("loading the TLS key pair: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if c.TLSClientCA != "" {
		pem, err := os.ReadFile(c.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading --tls-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--tls-client-ca-file holds no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPair is the server certificate, reloaded when its files change.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp identifies a version of a file: a rename or symlink flip changes
// the inode, an edit in place the size or time.
type fileStamp struct {
	ino, size int64
	mod       time.Time
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{size: st.Size(), mod: st.ModTime()}
	if sys, ok := st.Sys().(interface{ Ino() uint64 }); ok {
		s.ino = int64(sys.Ino())
	}
	return s
}

// certCheckInterval bounds how often a handshake looks at the files.
const certCheckInterval = time.Second

func (k *keyPair) load() error {
	stamp := [2]fileStamp{stampOf(k.certFile), stampOf(k.keyFile)}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	k.stamp, k.checked = stamp, time.Now()
	if err != nil {
		return err
	}
	k.cert = &cert
	return nil
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) >= certCheckInterval {
		k.checked = time.Now()
		if now := [2]fileStamp{stampOf(k.certFile), stampOf(k.keyFile)}; now != k.stamp {
			if err := k.load(); err != nil {
				k.log.Error("TLS key pair changed but does not load; the previous certificate keeps serving", "cert", k.certFile, "key", k.keyFile, "err", err)
			} else {
				k.log.Info("TLS key pair reloaded", "cert", k.certFile)
			}
		}
	}
	return k.cert, nil
}
