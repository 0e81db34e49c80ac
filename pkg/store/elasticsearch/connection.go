package elasticsearch

import (
	"errors"
	"fmt"
	"os"

	"github.com/execid/correlator/pkg/authn"
)

// Connection is a Config as an operator gives it: the API key in a file
// and the password in an environment variable, read only by Resolve, so
// no secret sits in a flag or a log.
type Connection struct {
	Config
	// APIKeyFile holds the base64 "id:key" API key.
	APIKeyFile string
	// PasswordEnv names the variable holding Username's password.
	PasswordEnv string
}

// Configured reports whether a cluster is named at all.
func (c *Connection) Configured() bool { return len(c.URLs) > 0 }

// Resolve reads the secrets into the client config. Without a URL it
// returns the config with its error, for a caller that brings its own.
func (c *Connection) Resolve() (Config, error) {
	cfg := c.Config
	if len(cfg.URLs) == 0 {
		cfg.Username = "" // secrets only with a cluster named
		return cfg, errors.New("validating Elasticsearch: give --es-url")
	}
	if c.APIKeyFile != "" {
		key, err := authn.FirstToken(c.APIKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("reading --es-api-key-file: %w", err)
		}
		cfg.APIKey = key
	}
	if cfg.Username != "" {
		cfg.Password = os.Getenv(c.PasswordEnv)
	}
	return cfg, cfg.Validate()
}
