package patchcalls

import "time"

type clock struct{}

func (clock) Now() time.Time { return time.Unix(0, 0) }
