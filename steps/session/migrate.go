package session

import (
	"context"

	"github.com/maasctl/maasctl/internal/migrate"
)

// MigrateTiers migrates the 3.2 tier system to subscriptions.
func (s *Session) MigrateTiers(ctx context.Context, o TiersOptions) (*TiersResult, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return migrate.MigrateTiers(ctx, clients, o)
}

// MigrateRollback undoes the tier migration recorded in o.Dir.
func (s *Session) MigrateRollback(ctx context.Context, o RollbackOptions) (*RollbackResult, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return migrate.Rollback(ctx, clients, o)
}

// MigratePlatformConfig carries the old ModelsAsService settings to
// their new owners.
func (s *Session) MigratePlatformConfig(ctx context.Context, o PlatformOptions) (*PlatformReport, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return migrate.MigratePlatformConfig(ctx, clients, o)
}
