from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0027_sweep_lease"),
    ]
    operations = [
        migrations.CreateModel(
            name="StoredFile",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=300, unique=True)),
                ("content", models.BinaryField()),
                ("size", models.PositiveBigIntegerField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
