export ENDPOINT=
