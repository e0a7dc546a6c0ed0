from slurm_marl.daemon.signature import family_from_name, infer_signatures
from slurm_marl.domain import Job


def test_family_from_job_names():
    assert family_from_name("resnet50-imagenet") == "resnet50"
    assert family_from_name("train_vgg19.sh") == "vgg19"
    assert family_from_name("ResNet-152 finetune") == "resnet152"
    assert family_from_name("my-lm-run") == "lm"
    # no family hidden inside unrelated words
    assert family_from_name("helm-chart") is None and family_from_name("film") is None
    assert family_from_name("wrap") is None


def test_inference_order_name_then_history_then_neutral():
    jobs = [Job(1, name="bert-pretrain", user="a"), Job(2, name="exp7", user="a"),
            Job(3, name="exp7", user="b"), Job(4, name="x", model_type="vgg16")]
    sigs = infer_signatures(jobs, {("a", "exp7"): "resnet50"})
    assert sigs == {1: "bert", 2: "resnet50"}  # 3: neutral, 4: already typed
