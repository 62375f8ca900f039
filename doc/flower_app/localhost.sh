# The SuperLink, on 127.0.0.1 only.
flower-superlink --insecure --host 127.0.0.1 --port 9100

# One SuperNode per site, each with its own data file. The variable makes
# a SuperNode start a message's ClientApp within 0.1 s of its arrival
# (Flower's default: it looks for work once a second).
export FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1
flower-supernode --insecure --superlink 127.0.0.1:9100 --host 127.0.0.1 \
    --port 9101 --node-config 'partition-id=0 data="/data/site0.npy"'
flower-supernode --insecure --superlink 127.0.0.1:9100 --host 127.0.0.1 \
    --port 9102 --node-config 'partition-id=1 data="/data/site1.npy"'
flower-supernode --insecure --superlink 127.0.0.1:9100 --host 127.0.0.1 \
    --port 9103 --node-config 'partition-id=2 data="/data/site2.npy"'

# The run, from the directory that holds the app's pyproject.toml.
flwr run . local --stream --run-config 'n-clusters=3'
