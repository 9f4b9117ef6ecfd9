"""What a job restored when it obeyed a rollback: the content of its ``RolledBack``."""

from __future__ import annotations

from dataclasses import dataclass

from streams.control.commands import ControlCommand


@dataclass(frozen=True)
class Restored:
    """What a job restored, when ``on_rollback`` says so itself (it may return one of these).

    ``checkpoint_id``: the checkpoint loaded, None for the base; ``step``: the step training
    resumes at; ``from_scratch``: the job restarted from its pretrained ``base_model`` alone,
    loading no checkpoint, not even its base checkpoint (SPEC §4, revision 2; then
    ``checkpoint_id`` must be None). The client sends it as the ``RolledBack`` event.
    """

    checkpoint_id: str | None
    step: int
    from_scratch: bool = False

    @classmethod
    def of(cls, cmd: ControlCommand) -> "Restored":
        """What obeying ``cmd`` restores: ``RESTART_FROM_SCRATCH`` is a restart from the
        pretrained model (``from_scratch``), anything else restores ``target_checkpoint_id``
        (None: the base) at ``target_step``."""
        if cmd.action == "RESTART_FROM_SCRATCH":
            return cls(None, cmd.target_step or 0, True)
        return cls(cmd.target_checkpoint_id, cmd.target_step or 0, False)
