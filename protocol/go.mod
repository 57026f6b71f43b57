module github.com/sluice-rl/sluice/protocol

go 1.22
