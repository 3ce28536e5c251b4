// Package secrets seals and opens tenants' secret values for storage:
// AES-256-GCM under a key from the operator's configuration, with the
// tenant and the secret's name as additional data (a sealed value moved
// to another tenant's or name's row does not open), and the key's id in
// the sealed form so a previous key can still open values during a
// rotation. It also validates secret names.
//
// It never logs, and its errors never hold a value or a key.
package secrets
