"""The MLflow model's code (MLflow "models from code"): loading a variant's logged model
runs this file, which names the model class; no pickled object is stored."""

import mlflow.models

from pipeline.translate.mlflow_model import TranslationModel

mlflow.models.set_model(TranslationModel())
