package agentsvc

import (
	"context"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The secret RPCs act on the caller's tenant only. A value is never logged
// (s.status logs INTERNAL errors, whose text never holds one) and never
// returned.

func secretInfo(s store.Secret) *plumbv1.SecretInfo {
	return &plumbv1.SecretInfo{Name: s.Name, CreateTime: timestamppb.New(s.CreatedAt), UpdateTime: timestamppb.New(s.UpdatedAt)}
}

func (s *Service) vault() (*secrets.Vault, error) {
	if s.cfg.Secrets == nil {
		return nil, fmt.Errorf("secrets are not available on this agentd: %w", secrets.ErrNoKey)
	}
	return s.cfg.Secrets, nil
}

// PutSecret stores a secret of the caller's tenant.
func (s *Service) PutSecret(ctx context.Context, req *plumbv1.PutSecretRequest) (*plumbv1.PutSecretResponse, error) {
	if err := secrets.ValidName(req.GetName()); err != nil {
		return nil, Status(InvalidField("name", "%v", err))
	}
	if n := len(req.GetValue()); n == 0 || n > secrets.MaxValueBytes {
		return nil, Status(InvalidField("value", "the value is %d bytes; want 1..%d", n, secrets.MaxValueBytes))
	}
	v, err := s.vault()
	if err != nil {
		return nil, Status(err)
	}
	sec, created, err := v.Put(ctx, tenant.From(ctx), req.GetName(), []byte(req.GetValue()))
	if err != nil {
		return nil, s.status("put secret", err)
	}
	return &plumbv1.PutSecretResponse{Secret: secretInfo(sec), Created: created}, nil
}

// ListSecrets lists the caller's tenant's secrets, without values.
func (s *Service) ListSecrets(ctx context.Context, _ *plumbv1.ListSecretsRequest) (*plumbv1.ListSecretsResponse, error) {
	v, err := s.vault()
	if err != nil {
		return nil, Status(err)
	}
	list, err := v.List(ctx, tenant.From(ctx))
	if err != nil {
		return nil, s.status("list secrets", err)
	}
	resp := &plumbv1.ListSecretsResponse{}
	for _, sec := range list {
		resp.Secrets = append(resp.Secrets, secretInfo(sec))
	}
	return resp, nil
}

// DeleteSecret deletes a secret of the caller's tenant.
func (s *Service) DeleteSecret(ctx context.Context, req *plumbv1.DeleteSecretRequest) (*plumbv1.DeleteSecretResponse, error) {
	if err := secrets.ValidName(req.GetName()); err != nil {
		return nil, Status(InvalidField("name", "%v", err))
	}
	v, err := s.vault()
	if err != nil {
		return nil, Status(err)
	}
	if err := v.Delete(ctx, tenant.From(ctx), req.GetName()); err != nil {
		return nil, s.status("delete secret", err)
	}
	return &plumbv1.DeleteSecretResponse{}, nil
}
