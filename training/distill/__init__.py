"""Cross-architecture distillation, attention teacher → hybrid student, in four stages (thesis §3.4):
stage 1 weight transfer (models/convert.py), stage 2 attention alignment (align.py), stage 3 logit
distillation (kd.py), stage 4 SFT; config.py holds DistillConfig, stages.py runs them
(``assocmem distill CONFIG.yaml [--stage N]``, parsed in cli/distill.py)."""
from .align import AlignmentObjective, alignment_error, student_attention, teacher_attention
from .config import AlignStage, DistillConfig, KDStage, SFTStage, StudentConfig, load_distill_config
from .kd import KDObjective, kd_loss
from .stages import check_distill, label_all_positions, run_distill

__all__ = ["AlignmentObjective", "alignment_error", "student_attention", "teacher_attention", "AlignStage",
           "DistillConfig", "KDStage", "SFTStage", "StudentConfig", "load_distill_config", "KDObjective", "kd_loss",
           "check_distill", "label_all_positions", "run_distill"]
