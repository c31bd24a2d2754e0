"""Every form a secret takes on a command line is masked before a record carries it (issue 51, case 7).

One table: an ``argv`` and the ``command`` a record shows for it. The rows that must stay as
typed are as much the contract as the masked ones: a mask that hides ``--keep-last 3`` or
``--max-tokens 512`` costs a run's provenance. The last test goes through a real saver and the
SQLite registry, where the shared copy of the command lives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import attach, model, trainer_engine
from tracker_saver import TrackerSaver, find_models
from tracker_saver.core.masked_command import mask_command

#: The sentinel every secret below holds: it must never reach the masked command.
SECRET = "hunter2"

#: argv after ``train.py`` -> the command shown after ``train.py ``.
FORMS = [
    # issue 51's own line: a value that starts with '-', a passphrase
    (["--password", "-Xy9hunter2", "--db-passphrase", "hunter2"], "--password *** --db-passphrase ***"),
    # --name VALUE and --name=VALUE, each spelling of a secret name
    (["--password", "hunter2"], "--password ***"),
    (["--password=hunter2"], "--password=***"),
    (["--password=-hunter2"], "--password=***"),
    (["--passwd", "hunter2"], "--passwd ***"),
    (["--pass", "hunter2"], "--pass ***"),
    (["--db-pass", "hunter2"], "--db-pass ***"),
    (["--pwd", "hunter2"], "--pwd ***"),
    (["--pw=hunter2"], "--pw=***"),
    (["--passphrase", "hunter2"], "--passphrase ***"),
    (["--ssh_passphrase", "hunter2"], "--ssh_passphrase ***"),
    (["--secret", "hunter2"], "--secret ***"),
    (["--client-secret=hunter2"], "--client-secret=***"),
    (["--aws-secret-access-key", "hunter2"], "--aws-secret-access-key ***"),
    (["--token", "hunter2"], "--token ***"),
    (["--hf_token", "hunter2"], "--hf_token ***"),
    (["--auth-token", "hunter2"], "--auth-token ***"),
    (["--key", "hunter2"], "--key ***"),
    (["--api-key", "hunter2"], "--api-key ***"),
    (["--api_key=hunter2"], "--api_key=***"),
    (["--apikey", "hunter2"], "--apikey ***"),
    (["--apiKey", "hunter2"], "--apiKey ***"),
    (["--dbPassword", "hunter2"], "--dbPassword ***"),
    (["--dbpassword", "hunter2"], "--dbpassword ***"),
    (["--private-key", "hunter2"], "--private-key ***"),
    (["--encryption-key", "hunter2"], "--encryption-key ***"),
    (["--credential", "hunter2"], "--credential ***"),
    (["--gcp-credentials", "hunter2"], "--gcp-credentials ***"),
    (["--auth", "user:hunter2"], "--auth ***"),
    (["--basic-auth", "user:hunter2"], "--basic-auth ***"),
    (["--sig", "hunter2"], "--sig ***"),
    (["--signature", "hunter2"], "--signature ***"),
    (["--sas", "sv=1&sig=hunter2"], "--sas ***"),
    (["--Password", "hunter2"], "--Password ***"),
    (["--password2", "hunter2"], "--password2 ***"),
    # single-dash long options (Java, Go, some scripts)
    (["-api-key", "hunter2", "-v"], "-api-key *** -v"),
    (["-password", "hunter2"], "-password ***"),
    # the next argument is the value unless it is another long option or --
    (["--token", "-hunter2", "-v"], "--token *** -v"),
    (["--auth", "--lr", "0.1"], "--auth --lr 0.1"),
    (["--password", "--", "data/"], "--password -- data/"),
    (["--lr", "0.1", "--token"], "--lr 0.1 --token"),
    # the short -p of mysql and sshpass (ambiguous: masked; a bare -p asks, so a '-' after it is no value)
    (["-p", "hunter2"], "-p ***"),
    (["-phunter2"], "-p***"),
    (["-p=hunter2"], "-p=***"),
    (["-p", "-v"], "-p -v"),
    # NAME=VALUE: environment style, Hydra overrides, inside one quoted argument
    (["PASSWORD=hunter2"], "PASSWORD=***"),
    (["DB_PASSWORD=hunter2", "epochs=3"], "DB_PASSWORD=*** epochs=3"),
    (["WANDB_API_KEY=hunter2"], "WANDB_API_KEY=***"),
    (["HF_TOKEN=hunter2"], "HF_TOKEN=***"),
    (["db.password=hunter2", "model.depth=50"], "db.password=*** model.depth=50"),
    (["+db.password=hunter2"], "+db.password=***"),
    (["--opts", "token=hunter2 lr=0.1"], "--opts 'token=*** lr=0.1'"),
    (["--opts=secret=hunter2"], "--opts=secret=***"),
    # Name: value as a whole argument (an HTTP header)
    (["--header", "Authorization: Bearer hunter2"], "--header 'Authorization: ***'"),
    (["-H", "X-Api-Key: hunter2"], "-H 'X-Api-Key: ***'"),
    (["--header", "Accept: application/json"], "--header 'Accept: application/json'"),
    # URLs: userinfo, query and fragment secrets
    (["--url", "https://user:hunter2@host/p"], "--url https://***@host/p"),
    (["--db", "postgres://me:hunter2@db:5432/x"], "--db postgres://***@db:5432/x"),
    (["--repo", "https://hunter2@github.com/o/r.git"], "--repo https://***@github.com/o/r.git"),
    (["--db=postgres://me:p@ss:hunter2@db/x"], "--db=postgres://***@db/x"),
    (
        ["--data", "https://acct.blob.core.windows.net/c/d.tar?sv=2022-11-02&se=2030&sig=hunter2"],
        "--data 'https://acct.blob.core.windows.net/c/d.tar?sv=2022-11-02&se=2030&sig=***'",
    ),
    (
        ["https://b.s3.amazonaws.com/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=hunter2&X-Amz-Security-Token=hunter2"],
        "'https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***'",
    ),
    (["--hook", "https://h.example/x?token=hunter2&v=1"], "--hook 'https://h.example/x?token=***&v=1'"),
    (
        ["--cb", "https://h.example/cb#access_token=hunter2&token_type=bearer"],
        "--cb 'https://h.example/cb#access_token=***&token_type=bearer'",
    ),
    (["--maps", "https://maps.example/api?key=hunter2&q=x"], "--maps 'https://maps.example/api?key=***&q=x'"),
    (["--endpoint=http://u:hunter2@127.0.0.1:7480"], "--endpoint=http://***@127.0.0.1:7480"),
    # ...and what must stay as typed
    (["--keep-last", "3", "--monkey", "4"], "--keep-last 3 --monkey 4"),
    (["--use-auth", "--lr", "0.1"], "--use-auth --lr 0.1"),
    (["--no-password", "x"], "--no-password x"),
    (["--ask-pass", "x", "--label-key", "y"], "--ask-pass x --label-key y"),
    (["--token-env", "HF", "--token-ttl", "3600"], "--token-env HF --token-ttl 3600"),
    (["--password-file", "/run/secrets/db"], "--password-file /run/secrets/db"),
    (["--token-file=/run/t", "--password-stdin"], "--token-file=/run/t --password-stdin"),
    (["--aws-access-key-id", "AKIDEXAMPLE"], "--aws-access-key-id AKIDEXAMPLE"),
    (["--max-tokens", "512", "--tokenizer", "bert"], "--max-tokens 512 --tokenizer bert"),
    (["--pad-token", "[PAD]", "--eos-token", "</s>"], "--pad-token '[PAD]' --eos-token '</s>'"),
    (["--sort-key", "score", "--key-dim", "64"], "--sort-key score --key-dim 64"),
    (["--auth-type", "basic", "--pass-through", "x"], "--auth-type basic --pass-through x"),
    (["--keyframes", "8", "--passes", "2", "--bypass", "1"], "--keyframes 8 --passes 2 --bypass 1"),
    (["--lr=0.1", "epochs=3", "-v", "--out", "s3://bucket/prefix"], "--lr=0.1 epochs=3 -v --out s3://bucket/prefix"),
    (["--url", "https://host.example/p?page=2&q=cats"], "--url 'https://host.example/p?page=2&q=cats'"),
    (["--note", "weights: 3"], "--note 'weights: 3'"),
    (["-0.5", "--", "-v"], "-0.5 -- -v"),
]


@pytest.mark.parametrize(("argv", "shown"), FORMS, ids=[" ".join(argv)[:60] for argv, _ in FORMS])
def test_a_secret_in_any_form_is_masked_and_nothing_else_is(argv: list[str], shown: str) -> None:
    masked = mask_command(["train.py", *argv])
    assert masked == f"train.py {shown}"
    assert SECRET not in masked


def test_the_table_holds_many_forms_and_the_forms_that_stay() -> None:
    stays = [argv for argv, shown in FORMS if "***" not in shown]
    assert len(FORMS) >= 80 and len(stays) >= 15


def test_a_record_carries_the_masked_command_of_the_issue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["train.py", "--password", "-Xy9s3cr3t", "--db-passphrase", "hunter2", "--key", "k3y", "-pw0rd"]
    shown = "train.py --password *** --db-passphrase *** --key *** -p***"
    monkeypatch.setattr(sys, "argv", argv)  # what the saver reads its command from
    registry = str(tmp_path / "registry.db")
    saver = TrackerSaver(str(tmp_path / "out"), project="p", run="r", registry=registry)
    net = model()
    trainer = trainer_engine(net)
    attach(trainer, saver, {"model": net}, n_saved=1)
    trainer.run([0], max_epochs=1)
    saver.close()
    (record,) = find_models(project="p", registry=registry)
    assert record.metadata["command"] == shown
