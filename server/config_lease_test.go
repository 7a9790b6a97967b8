package server

import (
	"strings"
	"testing"
	"time"
)

func TestValidateLeaseSettings(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" = valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"expiry rate negative", func(c *Config) { c.LeaseExpiryRate = -1 }, "--lease-expiry-rate: must be > 0"},
		{"expiry rate 1", func(c *Config) { c.LeaseExpiryRate = 1 }, ""},
		{"checkpoint negative", func(c *Config) { c.LeaseCheckpointInterval = -time.Second }, "--lease-checkpoint-interval: must be > 0"},
		{"checkpoint 200ms", func(c *Config) { c.LeaseCheckpointInterval = 200 * time.Millisecond }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := threeMember("a")
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	c := Config{}
	c.ApplyDefaults()
	if c.LeaseExpiryRate != DefaultLeaseExpiryRate || c.LeaseCheckpointInterval != DefaultLeaseCheckpoint {
		t.Fatalf("lease defaults not applied: rate %d checkpoint %v", c.LeaseExpiryRate, c.LeaseCheckpointInterval)
	}
}
