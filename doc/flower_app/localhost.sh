# The SuperLink, on 127.0.0.1 only.
flower-superlink --insecure --host 127.0.0.1 --port 9100

# One SuperNode per site, each with its own data file, and beside it
# skfed's SuperExec on the SuperNode's Runtime API port: Flower's own,
# except that the ClientApp process each message gets is forked with
# Flower and skfed already imported (without the python line and
# --isolation process, the SuperNode starts Flower's SuperExec itself).
# The variable makes a SuperExec start a message's ClientApp within 0.1 s
# of its arrival (Flower's default: it looks for work once a second).
export FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1
flower-supernode --insecure --isolation process --superlink 127.0.0.1:9100 \
    --host 127.0.0.1 --port 9101 \
    --node-config 'partition-id=0 data="/data/site0.npy"'
python -m skfed.flower.superexec --insecure --runtime-api-address 127.0.0.1:9101
flower-supernode --insecure --isolation process --superlink 127.0.0.1:9100 \
    --host 127.0.0.1 --port 9102 \
    --node-config 'partition-id=1 data="/data/site1.npy"'
python -m skfed.flower.superexec --insecure --runtime-api-address 127.0.0.1:9102
flower-supernode --insecure --isolation process --superlink 127.0.0.1:9100 \
    --host 127.0.0.1 --port 9103 \
    --node-config 'partition-id=2 data="/data/site2.npy"'
python -m skfed.flower.superexec --insecure --runtime-api-address 127.0.0.1:9103

# The run, from the directory that holds the app's pyproject.toml.
flwr run . local --stream --run-config 'n-clusters=3'
